"""An index saved to a folder (meta.json, plus hnsw.bin or faiss.bin) and reopened; exact keeps no keys on disk."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, DataError, first_line
from ..io import atomic_dir, read_json, require_size, write_json, written_through
from .compression import parse_compression
from .exact import ExactIndex
from .faiss_index import FaissIndex
from .hnsw import PAPER_EF_SEARCH, SPACE, HnswIndex
from .milvus import LITE_FOLDER, MilvusIndex, copy_lite, open_milvus
from .search import BACKENDS
from .torch_index import TorchIndex, exact_index

META_FILE = "meta.json"
HNSW_FILE = "hnsw.bin"
FAISS_FILE = "faiss.bin"
# What a saved index may be: `index.backend`'s choices, and faiss for a compressed memory.
SAVED_BACKENDS = (*BACKENDS, FaissIndex.backend)
# meta.json's fields beyond backend, dim and count, by backend.
GRAPH_FIELDS = {"hnsw": ("M", "ef_construction", "space"), "faiss": ("M", "ef_construction", "compression"),
                "exact": (), "milvus": ("M", "ef_construction", "collection", "sha256", "uri", "token_env")}


def save_index(index: ExactIndex | HnswIndex | FaissIndex, folder: str | os.PathLike) -> Path:
    """Write `index` to `folder` atomically; a graph file cut short (a full disk) is an OSError naming it."""
    folder = Path(folder)
    if not isinstance(index, (ExactIndex, HnswIndex, FaissIndex, MilvusIndex)):
        raise TypeError(f"not an index: {type(index).__name__}")
    meta = index.meta if isinstance(index, MilvusIndex) else {
        "backend": index.backend, "dim": index.dim, "count": index.count,
        **{name: getattr(index, name) for name in GRAPH_FIELDS[index.backend]}}
    with atomic_dir(folder) as tmp:
        if isinstance(index, HnswIndex):
            index.graph.save_index(str(tmp / HNSW_FILE))  # unchecked writes: a full disk leaves it short, silently
            require_size(tmp / HNSW_FILE, index.graph.index_file_size())
        elif isinstance(index, FaissIndex):
            import faiss

            with written_through(tmp / FAISS_FILE) as handle:  # through Python, which checks every write
                faiss.write_index(index.index, faiss.PyCallbackIOWriter(handle.write))
        elif isinstance(index, MilvusIndex) and index.lite is not None:  # a server's index: its reference alone
            copy_lite(index.lite, tmp / LITE_FOLDER)
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
    if backend not in SAVED_BACKENDS:
        raise DataError(f"unknown index backend {backend!r} in {META_FILE} (known: {', '.join(SAVED_BACKENDS)})",
                        folder)
    needed = ("dim", "count", *GRAPH_FIELDS[backend])
    missing = [name for name in needed if name not in meta]
    if missing:
        raise DataError(f"{META_FILE} lacks {', '.join(missing)}", folder)
    for name in (name for name in needed if name in ("dim", "count", "M", "ef_construction")):
        if isinstance(meta[name], bool) or not isinstance(meta[name], int) or meta[name] < 0:
            raise DataError(f"{META_FILE}: {name} must be a non-negative integer, got {meta[name]!r}", folder)
    if backend == FaissIndex.backend and not _names_a_compression(meta["compression"]):
        raise DataError(f"{META_FILE}: not a compression this version knows: {meta['compression']!r}", folder)
    return meta


def _names_a_compression(name: Any) -> bool:
    try:
        return isinstance(name, str) and parse_compression(name) is not None
    except ConfigError:
        return False


def load_index(folder: str | os.PathLike, keys: np.ndarray | None = None, ef_search: int = PAPER_EF_SEARCH,
               threads: int = 0, device: str = "cpu") -> ExactIndex | TorchIndex | HnswIndex | FaissIndex | MilvusIndex:
    """Reopen an index `save_index` wrote; exact needs `keys` of the saved shape (TorchIndex on a GPU)."""
    folder = Path(folder)
    meta = saved_meta(folder)
    if keys is not None and (np.ndim(keys) != 2 or np.shape(keys) != (meta["count"], meta["dim"])):
        raise DataError(f"keys have shape {np.shape(keys)}, the index was built on ({meta['count']}, {meta['dim']})",
                        folder)
    if meta["backend"] == "exact":
        if keys is None:
            raise DataError("the exact index keeps no keys: pass the keys to load it", folder)
        index = exact_index(np.asarray(keys), device)
    elif meta["backend"] == "milvus":
        index = open_milvus(folder, meta, ef_search)
    elif meta["backend"] == "faiss":
        import faiss

        graph = _read_graph(folder, FAISS_FILE, faiss.read_index)
        if (graph.ntotal, graph.d) != (meta["count"], meta["dim"]):
            raise DataError(f"{FAISS_FILE} holds {graph.ntotal} keys of dimension {graph.d}, {META_FILE} says "
                            f"{meta['count']} of {meta['dim']}", folder)
        index = FaissIndex(graph, meta["compression"], meta["M"], meta["ef_construction"], ef_search, threads)
    else:
        import hnswlib

        if meta["space"] != SPACE:
            raise DataError(f"index space is {meta['space']!r}, expected {SPACE!r}", folder)
        graph = hnswlib.Index(space=SPACE, dim=meta["dim"])
        _read_graph(folder, HNSW_FILE, lambda path: graph.load_index(path, max_elements=meta["count"]))
        if graph.element_count != meta["count"]:
            raise DataError(f"{HNSW_FILE} holds {graph.element_count} keys, {META_FILE} says {meta['count']}", folder)
        index = HnswIndex(graph, meta["M"], meta["ef_construction"], ef_search, threads)
    index.source = folder
    return index


def _read_graph(folder: Path, name: str, read: Callable[[str], Any]) -> Any:
    """`read` of the graph file `name`; a missing or unreadable one is a DataError naming it."""
    path = folder / name
    if not path.is_file():
        raise DataError(f"{name} is missing", folder)
    try:
        return read(str(path))
    except RuntimeError as exc:
        raise DataError(f"cannot load {name} ({first_line(exc)})", folder) from None


def index_bytes(folder: str | os.PathLike) -> int:
    """Bytes of the index saved in `folder` as stored (bench/memory_budget.py compares them)."""
    folder = Path(folder)
    saved_meta(folder)
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())
