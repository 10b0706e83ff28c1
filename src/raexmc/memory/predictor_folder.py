"""The memory folder the package stage writes and the Predictor reads: the inference settings, the values'
input part Y_train, the labels' own ids and texts (data/label_records.py), the keys when the index is exact
(that backend keeps none), and files it copies in (the per-query λ model, a smaller memory's index).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..data.dataset import Dataset
from ..data.label_records import write_label_records
from ..errors import DataError
from ..io import atomic_dir, read_json, save_array, write_json
from .keys_values import KEYS_FILE, training_values

SETTINGS_FILE = "settings.json"
VALUES_FILE = "Y_train.npz"
SETTINGS = ("lambda", "b", "tau", "ef_search", "relevance", "input_max_len", "input_fields")


def write_memory(folder: str | os.PathLike, dataset: Dataset, settings: dict[str, Any],
                 keys: np.ndarray | None = None, copies: tuple[str | os.PathLike, ...] = (),
                 values: sp.csr_matrix | None = None) -> None:
    """Write the memory folder atomically, with the files and folders of `copies` copied in under their
    names; `settings` needs every key of SETTINGS. `values` replace Y_train when RAE's input keys are
    not the training inputs (a smaller memory: memory/input_memory.py)."""
    missing = [name for name in SETTINGS if name not in settings]
    if missing:
        raise ValueError(f"settings lack {', '.join(missing)}")
    Y_train = values
    if Y_train is None:
        Y_train = training_values(dataset.label_matrix("train"), settings["relevance"], copy=False)
    with atomic_dir(folder) as tmp:
        write_json(tmp / SETTINGS_FILE, {**settings, "num_train": Y_train.shape[0], "num_labels": Y_train.shape[1]})
        sp.save_npz(tmp / VALUES_FILE, Y_train)
        write_label_records(tmp, dataset.texts("labels"))
        if keys is not None:
            save_array(tmp / KEYS_FILE, np.asarray(keys, dtype=np.float32))
        for path in map(Path, copies):
            (shutil.copytree if path.is_dir() else shutil.copyfile)(path, tmp / path.name)


def read_settings(folder: str | os.PathLike, required: tuple[str, ...] = SETTINGS) -> dict[str, Any]:
    """The settings of a memory folder, or DataError unless it has them with every key of `required`."""
    folder = Path(folder)
    if not (folder / SETTINGS_FILE).is_file():
        raise DataError(f"not a predictor memory folder (no {SETTINGS_FILE}); run the package stage", folder)
    settings = read_json(folder / SETTINGS_FILE)
    missing = [name for name in required if not isinstance(settings, dict) or name not in settings]
    if missing:
        raise DataError(f"{SETTINGS_FILE} lacks {', '.join(missing)}: rerun the package stage", folder)
    return settings
