"""A RAE model in a folder, in the predictor memory folder's format (memory/predictor_folder.py): settings.json,
the values Y_train.npz, the member counts counts.npy when the prior is on, the per-query λ model when λ is
one, and the indexes (inputs/, labels/; for the exact backend, which keeps no keys, keys.npy).

`load_model` reads the folders the package stage writes (as `raexmc predict` and a served model do) and those
packaged before the split retrieval, the per-query λ or the prior existed; `save_model` writes one it reads.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..errors import DataError
from ..io import atomic_dir, load_array, load_sparse, write_json
from ..memory.exact import ExactIndex
from ..memory.hnsw import PAPER_EF_SEARCH
from ..memory.indexes import INDEXED_KEY_SETS, load_joint_search
from ..memory.input_memory import COUNTS_FILE, own_index_folders
from ..memory.keys_values import KEYS_FILE
from ..memory.merge import JOINT, JointSearch, RaeRetrieval
from ..memory.persistence import save_index
from ..memory.predictor_folder import SETTINGS_FILE, VALUES_FILE, read_settings
from .model import RaeModel, RaeSettings
from .query_lambda import QUERY_LAMBDA_FILE, read_query_lambda

MODEL_SETTINGS = ("lambda", "b", "tau")  # what settings.json must hold for the model; the Predictor reads more


def load_model(folder: str | os.PathLike, index: str | os.PathLike | None = None, threads: int = 0) -> RaeModel:
    """The RAE model of a memory folder, searching the indexes the folder holds of its own and, for the key sets
    it holds none of, those of the index stage's folder `index` (no search where there is no index at all; a
    folder with one key set's index of its own needs `index` for the other, refused at load, not at a query)."""
    folder = Path(folder)
    settings = read_settings(folder, MODEL_SETTINGS)
    tau, b = float(settings["tau"]), int(settings["b"])
    lam = float(settings["lambda"])
    if settings.get("query_lambda", False):  # memory folders packaged before it existed lack the key
        lam = read_query_lambda(folder / QUERY_LAMBDA_FILE).check_settings(tau, b, folder / QUERY_LAMBDA_FILE)
    # memory folders packaged before the split retrieval existed lack the keys: the joint one
    retrieval = RaeRetrieval(settings.get("retrieval", JOINT), settings.get("label_share"))
    values = load_sparse(folder / VALUES_FILE)
    log_counts = None
    if settings.get("memory", {}).get("prior") and (folder / COUNTS_FILE).is_file():
        log_counts = np.log(load_array(folder / COUNTS_FILE).astype(np.float64))
        if len(log_counts) != values.shape[0]:
            raise DataError(f"{COUNTS_FILE} counts {len(log_counts)} input keys, {VALUES_FILE} has {values.shape[0]}",
                            folder)
    own = own_index_folders(folder)
    if index is None and 0 < len(own) < len(INDEXED_KEY_SETS):
        raise DataError(f"holds its own index of {', '.join(own)} only: give the index stage's folder for the rest",
                        folder)
    search = None
    if index is not None or len(own) == len(INDEXED_KEY_SETS):
        keys = load_array(folder / KEYS_FILE) if (folder / KEYS_FILE).is_file() else None
        search = load_joint_search(index, keys, ef_search=int(settings.get("ef_search", PAPER_EF_SEARCH)),
                                   threads=threads, **own)
        held = (search.inputs.count, search.labels.count)
        if held != values.shape:
            raise DataError(f"the index holds {held[0]} input and {held[1]} label keys, the memory "
                            f"{values.shape[0]} and {values.shape[1]}: rebuild both", index or folder)
    return RaeModel(values, RaeSettings(lam, tau, b, retrieval), log_counts, search)


def save_model(model: RaeModel, folder: str | os.PathLike) -> None:
    """Write `model` to `folder` atomically, as `load_model` reads it back: its search too, when it has one of
    saved kinds (exact, HNSW or faiss indexes)."""
    settings = model.settings
    if settings.b is None:
        raise ValueError("a saved model needs its b (RaeSettings.b): a folder's predictor retrieves b keys")
    lam = settings.lam.fallback if settings.per_query else settings.lam
    meta = {"lambda": lam, "tau": settings.tau, "b": settings.b, "query_lambda": settings.per_query,
            "retrieval": settings.retrieval.mode, "label_share": settings.retrieval.label_share,
            "memory": {"prior": model.log_counts is not None},
            "num_train": model.num_inputs, "num_labels": model.num_labels}
    with atomic_dir(folder) as tmp:
        sp.save_npz(tmp / VALUES_FILE, sp.csr_matrix(model.values))
        if model.log_counts is not None:  # the counts are integers: exp then rounding gives them back exactly
            np.save(tmp / COUNTS_FILE, np.rint(np.exp(model.log_counts)).astype(np.int64))
        if settings.per_query:
            write_json(tmp / QUERY_LAMBDA_FILE, settings.lam.to_json())
        if model.search is not None:
            meta["ef_search"] = _save_search(model.search, tmp)
        write_json(tmp / SETTINGS_FILE, meta)


def _save_search(search: JointSearch, folder: Path) -> int:
    """Save both indexes of `search` as the folder's own (and the keys, if exact); returns their beam ef_search."""
    parts = (search.inputs, search.labels)
    for name, part in zip(INDEXED_KEY_SETS, parts):
        save_index(part, folder / name)
    if all(isinstance(part, ExactIndex) for part in parts):
        np.save(folder / KEYS_FILE, np.vstack([part.keys for part in parts]))
    elif any(isinstance(part, ExactIndex) for part in parts):
        raise ValueError("cannot save a search that mixes exact and graph indexes")
    return getattr(search.inputs, "ef_search", PAPER_EF_SEARCH)
