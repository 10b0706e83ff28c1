"""Saving an index to a folder and reopening it: `meta.json`, plus `hnsw.bin` for HNSW.

The exact backend keeps no keys on disk; reopening it needs them again. hnswlib does not store the
search beam, so a reopened HNSW index gets ef_search set again.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DataError
from ..io import atomic_dir, read_json, write_json
from .exact import CHUNK_ROWS, ExactIndex
from .hnsw import PAPER_EF_SEARCH, SPACE, HnswIndex
from .search import BACKENDS

META_FILE = "meta.json"
HNSW_FILE = "hnsw.bin"


def save_index(index: ExactIndex | HnswIndex, folder: str | os.PathLike) -> Path:
    """Write `index` to `folder` atomically: meta.json, plus hnsw.bin for HNSW (exact keeps no keys)."""
    folder = Path(folder)
    meta: dict[str, Any] = {"backend": index.backend, "dim": index.dim, "count": index.count}
    if isinstance(index, HnswIndex):
        meta.update(M=index.M, ef_construction=index.ef_construction, space=SPACE)
    elif not isinstance(index, ExactIndex):
        raise TypeError(f"not an index: {type(index).__name__}")
    with atomic_dir(folder) as tmp:
        if isinstance(index, HnswIndex):
            index.graph.save_index(str(tmp / HNSW_FILE))
        write_json(tmp / META_FILE, meta)
    return folder


def saved_meta(folder: str | os.PathLike) -> dict[str, Any]:
    """The checked meta.json of the index saved in `folder`: its backend, dim, count (and HNSW settings)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError("index folder not found", folder)
    try:
        meta = read_json(folder / META_FILE)
    except FileNotFoundError:
        raise DataError(f"not an index folder (no {META_FILE})", folder) from None
    except ValueError as exc:
        raise DataError(f"{META_FILE} is not valid JSON ({exc})", folder) from None
    if not isinstance(meta, dict):
        raise DataError(f"{META_FILE} must hold a JSON object", folder)
    backend = meta.get("backend")
    if backend not in BACKENDS:
        raise DataError(f"unknown index backend {backend!r} in {META_FILE} (known: {', '.join(BACKENDS)})", folder)
    needed = ("dim", "count") + (("M", "ef_construction", "space") if backend == "hnsw" else ())
    missing = [name for name in needed if name not in meta]
    if missing:
        raise DataError(f"{META_FILE} lacks {', '.join(missing)}", folder)
    for name in needed:
        if name != "space" and (isinstance(meta[name], bool) or not isinstance(meta[name], int) or meta[name] < 0):
            raise DataError(f"{META_FILE}: {name} must be a non-negative integer, got {meta[name]!r}", folder)
    return meta


def load_index(folder: str | os.PathLike, keys: np.ndarray | None = None, ef_search: int = PAPER_EF_SEARCH,
               threads: int = 0, chunk_rows: int = CHUNK_ROWS) -> ExactIndex | HnswIndex:
    """Reopen an index written by `save_index`; the exact backend needs `keys` again.

    Given keys must match the saved dimension and count. HNSW comes back with ef set to ef_search.
    """
    folder = Path(folder)
    meta = saved_meta(folder)
    if keys is not None:
        keys = np.asarray(keys)
        if keys.ndim != 2 or keys.shape != (meta["count"], meta["dim"]):
            raise DataError(f"keys have shape {keys.shape}, the index was built on "
                            f"({meta['count']}, {meta['dim']})", folder)
    if meta["backend"] == "exact":
        if keys is None:
            raise DataError("the exact index keeps no keys: pass the keys to load it", folder)
        return ExactIndex(keys, chunk_rows=chunk_rows)
    import hnswlib

    if meta["space"] != SPACE:
        raise DataError(f"index space is {meta['space']!r}, expected {SPACE!r}", folder)
    path = folder / HNSW_FILE
    if not path.is_file():
        raise DataError(f"{HNSW_FILE} is missing", folder)
    graph = hnswlib.Index(space=SPACE, dim=meta["dim"])
    try:
        graph.load_index(str(path), max_elements=meta["count"])
    except RuntimeError as exc:
        raise DataError(f"cannot load {HNSW_FILE} ({exc})", folder) from None
    if graph.element_count != meta["count"]:
        raise DataError(f"{HNSW_FILE} holds {graph.element_count} keys, {META_FILE} says {meta['count']}", folder)
    return HnswIndex(graph, M=meta["M"], ef_construction=meta["ef_construction"], ef_search=ef_search,
                     threads=threads)
