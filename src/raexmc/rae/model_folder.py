"""The self-contained folder a RaeModel saves to and loads from (no RaeModel import here). `read_model` checks the
manifest, then what a manifest cannot vouch for (finite values, widths, the tokenizer's vocabulary).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..data.label_records import OFFSETS_FILE, RECORDS_FILE, LabelRecords
from ..errors import DataError
from ..io import (
    MANIFEST_FILE,
    atomic_dir,
    checked_manifest,
    load_array,
    load_sparse,
    read_json,
    save_array,
    write_json,
    write_manifest,
)
from ..memory.exact import ExactIndex
from ..memory.hnsw import PAPER_EF_SEARCH
from ..memory.indexes import INDEXED_KEY_SETS
from ..memory.input_memory import COUNTS_FILE, VALUES_FILE
from ..memory.keys_values import KEYS_FILE, load_keys
from ..memory.merge import JointSearch, recorded_retrieval
from ..memory.persistence import META_FILE, load_index, save_index
from ..memory.prior import log_prior
from ..settings import AtLeast1, EmbedPrecision, Positive, Share, TextFields, record_value

FORMAT = 2  # manifest.json's "format": a folder of another format is refused rather than misread
SETTINGS_FILE = "settings.json"
ENCODER_FOLDER = "encoder"
CARD_FILE = "README.md"
RERUN = "rerun the package stage"
# The files every model folder holds, and those each of its parts needs (its tokenizer's for the encoder: without
# them transformers builds a 5-token tokenizer from config.json, and every text reads as [UNK]).
BASE_FILES = (SETTINGS_FILE, VALUES_FILE, CARD_FILE)
PART_FILES = {"encoder": tuple(f"{ENCODER_FOLDER}/{name}" for name in ("config.json", "tokenizer.json",
                                                                        "tokenizer_config.json")),
              "labels": (RECORDS_FILE, OFFSETS_FILE),
              "search": tuple(f"{name}/{META_FILE}" for name in INDEXED_KEY_SETS)}
PARTS = tuple(PART_FILES)  # what a model that answers texts needs: `raexmc predict` and the served model


def save_model(model: Any, folder: str | os.PathLike) -> None:
    settings = model.settings
    if settings.b is None:
        raise ValueError("a saved model needs its b (RaeSettings.b): a folder's model retrieves b keys")
    meta = {"lambda": settings.lam, "tau": settings.tau, "b": settings.b, "retrieval": settings.retrieval.mode,
            "label_share": settings.retrieval.label_share, "prior": model.log_counts is not None,
            "input_max_len": None if model.encoder is None else model.encoder.max_len,
            "precision": None if model.encoder is None else model.encoder.precision,
            "input_fields": model.input_fields, "ef_search": PAPER_EF_SEARCH, "about": dict(model.about)}
    with atomic_dir(folder) as tmp:
        sp.save_npz(tmp / VALUES_FILE, sp.csr_matrix(model.values))
        if model.log_counts is not None:  # the counts are integers: exp then rounding gives them back exactly
            save_array(tmp / COUNTS_FILE, np.rint(np.exp(model.log_counts)).astype(np.int64))
        if model.search is not None:
            meta["ef_search"] = _save_search(model.search, tmp)
        if model.labels is not None:
            (tmp / RECORDS_FILE).write_bytes(model.labels.lines[:])
            save_array(tmp / OFFSETS_FILE, model.labels.offsets)
        if model.encoder is not None:
            model.encoder.save(tmp / ENCODER_FOLDER)
        write_json(tmp / SETTINGS_FILE, meta)
        (tmp / CARD_FILE).write_text(model_card(model, meta), encoding="utf-8")
        parts = {"encoder": model.encoder, "labels": model.labels, "search": model.search}
        write_manifest(tmp, {"format": FORMAT, "parts": [name for name in PARTS if parts[name] is not None]})


def _save_search(search: JointSearch, folder: Path) -> int:
    """Save both indexes (an exact one with its keys); returns the beam ef_search of its graphs."""
    parts = (search.inputs, search.labels)
    for name, part in zip(INDEXED_KEY_SETS, parts):
        save_index(part, folder / name)
        if isinstance(part, ExactIndex):
            save_array(folder / name / KEYS_FILE, np.asarray(part.keys, dtype=np.float32))
    return next((part.ef_search for part in parts if hasattr(part, "ef_search")), PAPER_EF_SEARCH)


def read_model(folder: str | os.PathLike, device: str = "cpu", threads: int = 0,
               needs: tuple[str, ...] = PARTS) -> dict[str, Any]:
    """The RaeModel fields `save_model` wrote; a folder that lacks a part of `needs` is a DataError naming it."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"model folder not found: {RERUN}", folder)
    parts = _checked_parts(folder, needs)
    settings = read_settings(folder / SETTINGS_FILE)
    values = load_sparse(folder / VALUES_FILE)
    _check_values(values.data, folder / VALUES_FILE)
    num_inputs, num_labels = values.shape
    log_counts = None
    if settings["prior"]:
        counts = load_array(folder / COUNTS_FILE)
        if not np.issubdtype(counts.dtype, np.integer) or (counts < 1).any():
            raise DataError(f"member counts must be integers >= 1: {RERUN}", folder / COUNTS_FILE)
        log_counts = log_prior(True, counts)
        _check_count(len(log_counts), num_inputs, "input keys", folder / COUNTS_FILE)
    labels = None
    if "labels" in parts:
        labels = LabelRecords.open(folder)
        _check_count(len(labels), num_labels, "labels", folder / RECORDS_FILE)
    encoder = _load_encoder(folder, settings, device) if "encoder" in needs else None
    search = (_load_search(folder, values.shape, settings["ef_search"], threads, encoder and encoder.dim, device)
              if "search" in parts else None)
    return {"values": values, "log_counts": log_counts, "encoder": encoder, "labels": labels,
            "settings": {"lam": settings["lambda"], "tau": settings["tau"], "b": settings["b"],
                         "retrieval": settings["retrieval"]},
            "search": search, "input_fields": settings["input_fields"], "about": settings["about"]}


def _checked_parts(folder: Path, needs: tuple[str, ...]) -> list[str]:
    """The parts the manifest lists, once it vouches for every file, its format and the files of `needs`."""
    manifest = checked_manifest(folder, RERUN)
    path = folder / MANIFEST_FILE
    if manifest.get("format") != FORMAT:
        raise DataError(f"format {manifest.get('format')!r}, this code reads format {FORMAT}: {RERUN}", path, "format")
    parts = manifest.get("parts")
    if not isinstance(parts, list) or not set(parts) <= set(PARTS):
        raise DataError(f"must list parts among {', '.join(PARTS)}, got {parts!r}: {RERUN}", path, "parts")
    lacking = [part for part in needs if part not in parts]
    if lacking:
        raise DataError(f"a model without its {', '.join(lacking)} ({MANIFEST_FILE} lists the parts "
                        f"{', '.join(parts) or 'none'}): {RERUN}", folder)
    for name in (*BASE_FILES, *(name for part in parts for name in PART_FILES[part])):
        if name not in manifest["files"]:
            raise DataError(f"missing, and not in {MANIFEST_FILE}: a model folder with its parts needs it: {RERUN}",
                            folder / name)
    return parts


def _check_values(data: np.ndarray, path: Path) -> None:
    """Values are relevances: finite and >= 0 (else they would outweigh the label keys' half of a score)."""
    if not np.isfinite(data).all():
        raise DataError(f"holds NaN or infinite values: {RERUN}", path)
    if (data < 0).any():
        raise DataError(f"holds negative values (a relevance is >= 0, found {data.min():g}): {RERUN}", path)


def _load_encoder(folder: Path, settings: dict[str, Any], device: str) -> Any:
    if settings["input_max_len"] is None:
        raise DataError(f"must be an integer >= 1 for the model's encoder, got null: {RERUN}",
                        folder / SETTINGS_FILE, "input_max_len")
    from transformers.utils import logging as transformers_logging

    from ..encoder.text_encoder import TextEncoder  # imports torch: only a model with an encoder needs it

    transformers_logging.disable_progress_bar()  # `raexmc predict` errors stay one line on stderr
    # queries are encoded at the precision the keys were embedded at (int8 is ONNX Runtime's, on the CPU)
    return TextEncoder.load(folder / ENCODER_FOLDER, "cpu" if settings["precision"] == "int8" else device,
                            settings["precision"] or "auto", settings["input_max_len"], stage_output=True)


def _load_search(folder: Path, shape: tuple[int, int], ef_search: int, threads: int,
                 dim: int | None, device: str = "cpu") -> JointSearch:
    """Both indexes, checked to hold the values' rows (inputs) or columns (labels) of keys of width `dim`."""
    parts = []
    for name, count, kind in zip(INDEXED_KEY_SETS, shape, ("input", "label")):
        keys = folder / name / KEYS_FILE
        part = load_index(folder / name, keys=load_keys(keys, RERUN) if keys.is_file() else None, ef_search=ef_search,
                          threads=threads, device=device)
        _check_count(part.count, count, f"{kind} keys", folder / name, f"{VALUES_FILE} has {count}")
        if dim is not None and part.dim != dim:
            raise DataError(f"holds keys of dimension {part.dim}, the encoder's vectors have {dim}: {RERUN}",
                            folder / name)
        parts.append(part)
    return JointSearch(*parts)


def _check_count(held: int, expected: int, what: str, path: Path, against: str | None = None) -> None:
    if held != expected:
        raise DataError(f"holds {held} {what}, {against or f'{VALUES_FILE} has {expected}'}: {RERUN}", path)


def read_settings(path: Path) -> dict[str, Any]:
    """settings.json's values, each checked (a DataError naming the key); `retrieval` a RaeRetrieval."""
    raw = read_json(path)
    if not isinstance(raw, dict):
        raise DataError(f"not a JSON object: {RERUN}", path)
    if raw.get("query_lambda"):  # written by 0.2.0 with infer.query_lambda, which later versions dropped
        raise DataError(f"a per-query λ model, which this version does not serve: {RERUN}", path, "query_lambda")

    def value(key: str, kind: Any) -> Any:
        if key not in raw:
            raise DataError(f"lacks {key}: {RERUN}", path)
        return record_value(kind, raw[key], path, key, RERUN)

    settings = {"lambda": value("lambda", Share), "tau": value("tau", Positive), "b": value("b", AtLeast1),
                "ef_search": value("ef_search", AtLeast1),
                "prior": value("prior", bool), "input_fields": value("input_fields", TextFields),
                "input_max_len": value("input_max_len", AtLeast1 | None),  # null: no encoder
                "precision": value("precision", EmbedPrecision | None), "about": value("about", dict[str, Any])}
    settings["retrieval"] = recorded_retrieval(value("retrieval", Any), value("label_share", Any), path, RERUN)
    return settings


USAGE = """```python
from raexmc import RaeModel

model = RaeModel.load("{name}")
answers, _ = model.predict(["a query text"], k=5)
```

or `raexmc predict --model {name} "a query text"`."""


def model_card(model: Any, settings: dict[str, Any]) -> str:
    """README.md of a saved RaeModel whose settings.json holds `settings`, readable without the project."""
    about = dict(settings["about"])
    dataset, metrics = about.pop("dataset", None), about.pop("metrics", None)
    lines = [f"# RAE-XMC model{f': {dataset}' if dataset else ''}", "",
             "Extreme multi-label classification by a retrieval-augmented encoder (RAE-XMC): a query's b nearest keys "
             "among the training inputs and the labels, p = softmax(q.k / tau), label scores lambda * p.V + "
             "(1 - lambda) * p (label keys).", "",
             "## Use", "", USAGE.format(name="<this folder>"), "",
             "## Model", "",
             f"- {model.num_inputs} input keys, {model.num_labels} labels{_indexes(model.search, settings)}",
             f"- lambda {settings['lambda']}, tau {settings['tau']}, b {settings['b']}, "
             f"retrieval {settings['retrieval']}"
             + ("" if settings["label_share"] is None else f" (label share {settings['label_share']})"),
             f"- prior (tau * log n on merged keys): {'on' if settings['prior'] else 'off'}",
             "- encoder: none" if model.encoder is None else
             f"- encoder: encoder/ (sentence-transformers layout), inputs as {settings['input_fields']}, "
             f"max length {settings['input_max_len']} tokens"]
    if metrics:
        lines += ["", "## Metrics", "", "| metric | value |", "|---|---|",
                  *(f"| {name} | {value} |" for name, value in metrics.items())]
    if about:
        lines += ["", "## Provenance", "", *(f"- {key}: {_text(value)}" for key, value in about.items())]
    return "\n".join(lines) + "\n"


def _indexes(search: Any, settings: dict[str, Any]) -> str:
    """The indexes' part of the card's first line (a graph's beam too)."""
    if search is None:
        return ""
    backends = (search.inputs.backend, search.labels.backend)
    beam = f", ef_search {settings['ef_search']}" if set(backends) - {"exact"} else ""
    return f"; indexes: {backends[0]} (inputs), {backends[1]} (labels){beam}"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
