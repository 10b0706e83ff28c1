"""The folder a RaeModel saves to and loads from (RaeModel.save / RaeModel.load), self-contained: no path inside
it points out of it, so it loads the same after a move to another directory or machine. It reads and writes the
model's parts and imports no RaeModel: rae/model.py builds the model from them, so imports go one way.

    settings.json        λ, τ, b, retrieval and label share, ef_search, prior, the encoder's text recipe, `about`
    values.npz           V: the input keys' label rows (the label keys' are the identity)
    counts.npy           each input key's member count, where the prior is on (memory/prior.py)
    query_lambda.json    the per-query λ model, where λ is one (rae/query_lambda.py)
    inputs/, labels/     the two indexes (memory/persistence.py); an exact one holds its keys.npy
    label_records.jsonl, label_offsets.npy    the labels' own ids and texts (data/label_records.py)
    encoder/             the encoder, in the sentence-transformers layout
    README.md            the model card: what `about` says of where it came from, and how to use it

settings.json is read once, here, and each value checked: a bad one is a DataError naming settings.json and
its key.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..data.label_records import OFFSETS_FILE, RECORDS_FILE, LabelRecords
from ..errors import DataError
from ..io import atomic_dir, load_array, load_sparse, read_json, save_array, write_json
from ..memory.exact import ExactIndex
from ..memory.hnsw import PAPER_EF_SEARCH
from ..memory.indexes import INDEXED_KEY_SETS
from ..memory.input_memory import COUNTS_FILE, VALUES_FILE
from ..memory.keys_values import KEYS_FILE, load_keys
from ..memory.merge import JointSearch, recorded_retrieval
from ..memory.persistence import load_index, save_index
from ..memory.prior import log_prior
from ..settings import AtLeast1, EmbedPrecision, Positive, Share, TextFields, record_value
from .model_card import model_card
from .query_lambda import QUERY_LAMBDA_FILE, read_query_lambda

FORMAT = 1  # settings.json's "format": a folder of another format is refused rather than misread
SETTINGS_FILE = "settings.json"
ENCODER_FOLDER = "encoder"
CARD_FILE = "README.md"
RERUN = "rerun the package stage"


def save_model(model: Any, folder: str | os.PathLike) -> None:
    """Write `model` (a RaeModel) to `folder` atomically, as `read_model` reads it back: its search too, when it
    has one (exact, HNSW or faiss indexes), its encoder and its labels when it has them."""
    settings = model.settings
    if settings.b is None:
        raise ValueError("a saved model needs its b (RaeSettings.b): a folder's model retrieves b keys")
    meta = {"format": FORMAT, "lambda": settings.lam.fallback if settings.per_query else settings.lam,
            "query_lambda": settings.per_query, "tau": settings.tau, "b": settings.b,
            "retrieval": settings.retrieval.mode, "label_share": settings.retrieval.label_share,
            "prior": model.log_counts is not None, "input_fields": model.input_fields,
            "input_max_len": None if model.encoder is None else model.encoder.max_len,
            "precision": None if model.encoder is None else model.encoder.precision,
            "ef_search": PAPER_EF_SEARCH, "about": dict(model.about)}
    with atomic_dir(folder) as tmp:
        sp.save_npz(tmp / VALUES_FILE, sp.csr_matrix(model.values))
        if model.log_counts is not None:  # the counts are integers: exp then rounding gives them back exactly
            save_array(tmp / COUNTS_FILE, np.rint(np.exp(model.log_counts)).astype(np.int64))
        if settings.per_query:
            write_json(tmp / QUERY_LAMBDA_FILE, settings.lam.to_json())
        if model.search is not None:
            meta["ef_search"] = _save_search(model.search, tmp)
        if model.labels is not None:
            (tmp / RECORDS_FILE).write_bytes(model.labels.lines[:])
            save_array(tmp / OFFSETS_FILE, model.labels.offsets)
        if model.encoder is not None:
            model.encoder.save(tmp / ENCODER_FOLDER)
        write_json(tmp / SETTINGS_FILE, meta)
        (tmp / CARD_FILE).write_text(model_card(model, meta), encoding="utf-8")


def _save_search(search: JointSearch, folder: Path) -> int:
    """Save both indexes of `search` (an exact one with its keys); returns the beam ef_search of its graphs."""
    parts = (search.inputs, search.labels)
    for name, part in zip(INDEXED_KEY_SETS, parts):
        save_index(part, folder / name)
        if isinstance(part, ExactIndex):
            save_array(folder / name / KEYS_FILE, np.asarray(part.keys, dtype=np.float32))
    return next((part.ef_search for part in parts if hasattr(part, "ef_search")), PAPER_EF_SEARCH)


def read_model(folder: str | os.PathLike, device: str = "cpu", threads: int = 0) -> dict[str, Any]:
    """The fields of the RaeModel that `save_model` wrote into `folder` (RaeModel's keyword arguments, "settings"
    those of its RaeSettings), its encoder on `device` and its search on `threads` CPU threads (0: all); a folder
    that is not one, or whose parts disagree, is a DataError naming the file (and key) and what to do."""
    folder = Path(folder)
    if not (folder / SETTINGS_FILE).is_file():
        raise DataError(f"not a RAE model folder (no {SETTINGS_FILE}): {RERUN}", folder)
    settings = read_settings(folder / SETTINGS_FILE)
    values = load_sparse(folder / VALUES_FILE)
    num_inputs, num_labels = values.shape
    lam = settings["lambda"]
    if settings["query_lambda"]:
        path = folder / QUERY_LAMBDA_FILE
        lam = read_query_lambda(path, settings["tau"], settings["b"])
    log_counts = None
    if settings["prior"]:
        log_counts = log_prior(True, load_array(folder / COUNTS_FILE))
        _check_count(len(log_counts), num_inputs, "input keys", folder / COUNTS_FILE)
    labels = None
    if (folder / RECORDS_FILE).is_file():
        labels = LabelRecords.open(folder)
        _check_count(len(labels), num_labels, "labels", folder / RECORDS_FILE)
    encoder = None
    if (folder / ENCODER_FOLDER).is_dir():
        if settings["input_max_len"] is None:
            raise DataError(f"must be an integer >= 1 for the model's encoder, got null: {RERUN}",
                            folder / SETTINGS_FILE, "input_max_len")
        from transformers.utils import logging as transformers_logging

        from ..encoder.text_encoder import TextEncoder  # imports torch: only a model with an encoder needs it

        transformers_logging.disable_progress_bar()  # `raexmc predict` errors stay one line on stderr
        # the precision the memory's keys were embedded at, so that queries are encoded as the keys were
        # (int8 is ONNX Runtime's on the CPU, whatever device the caller asked for)
        encoder = TextEncoder.load(folder / ENCODER_FOLDER, "cpu" if settings["precision"] == "int8" else device,
                                   settings["precision"] or "auto",
                                   settings["input_max_len"], stage_output=True)
    return {"values": values, "log_counts": log_counts, "encoder": encoder, "labels": labels,
            "settings": {"lam": lam, "tau": settings["tau"], "b": settings["b"], "retrieval": settings["retrieval"]},
            "search": _load_search(folder, values.shape, settings["ef_search"], threads),
            "input_fields": settings["input_fields"], "about": settings["about"]}


def _load_search(folder: Path, shape: tuple[int, int], ef_search: int, threads: int) -> JointSearch | None:
    """Both indexes of the folder, their beam at `ef_search`, each checked to hold as many keys as the values
    have rows (inputs) and columns (labels); None where the folder holds neither."""
    held = [folder / name for name in INDEXED_KEY_SETS if (folder / name).is_dir()]
    if not held:
        return None
    if len(held) < len(INDEXED_KEY_SETS):
        raise DataError(f"holds the index of {held[0].name} only, not both: {RERUN}", folder)
    parts = []
    for name, count, kind in zip(INDEXED_KEY_SETS, shape, ("input", "label")):
        keys = folder / name / KEYS_FILE
        part = load_index(folder / name, keys=load_keys(keys) if keys.is_file() else None, ef_search=ef_search,
                          threads=threads)
        _check_count(part.count, count, f"{kind} keys", folder / name, f"{VALUES_FILE} has {count}")
        parts.append(part)
    return JointSearch(*parts)


def _check_count(held: int, expected: int, what: str, path: Path, against: str | None = None) -> None:
    if held != expected:
        raise DataError(f"holds {held} {what}, {against or f'{VALUES_FILE} has {expected}'}: {RERUN}", path)


def read_settings(path: Path) -> dict[str, Any]:
    """settings.json's values, each checked (a DataError naming the file and the key otherwise); `retrieval`
    becomes a RaeRetrieval."""
    raw = read_json(path)
    if not isinstance(raw, dict):
        raise DataError(f"not a JSON object: {RERUN}", path)
    if raw.get("format") != FORMAT:
        raise DataError(f"format {raw.get('format')!r}, this code reads format {FORMAT}: {RERUN}", path, "format")

    def value(key: str, kind: Any) -> Any:
        if key not in raw:
            raise DataError(f"lacks {key}: {RERUN}", path)
        return record_value(kind, raw[key], path, key, RERUN)

    settings = {"lambda": value("lambda", Share), "query_lambda": value("query_lambda", bool),
                "tau": value("tau", Positive), "b": value("b", AtLeast1), "ef_search": value("ef_search", AtLeast1),
                "prior": value("prior", bool), "input_fields": value("input_fields", TextFields),
                "input_max_len": value("input_max_len", AtLeast1 | None),  # null: no encoder
                "precision": value("precision", EmbedPrecision | None), "about": value("about", dict[str, Any])}
    settings["retrieval"] = recorded_retrieval(value("retrieval", Any), value("label_share", Any), path, RERUN)
    return settings

