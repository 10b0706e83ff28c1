"""One index per key set of the memory, as the index stage writes them (one sub-folder each)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from ..io import atomic_dir
from .exact import CHUNK_ROWS, ExactIndex
from .hnsw import PAPER_EF_CONSTRUCTION, PAPER_EF_SEARCH, PAPER_M, HnswIndex, build_hnsw
from .keys_values import KEY_SETS, memory_keys
from .persistence import load_index, save_index, saved_backend
from .search import BACKENDS


def make_index(backend: str, keys: np.ndarray, M: int = PAPER_M, ef_construction: int = PAPER_EF_CONSTRUCTION,
               threads: int = 0, seed: int = 0, ef_search: int = PAPER_EF_SEARCH, chunk_rows: int = CHUNK_ROWS,
               progress: bool = True) -> ExactIndex | HnswIndex:
    """The index that `index.backend` names, over `keys`."""
    if backend == "exact":
        return ExactIndex(keys, chunk_rows=chunk_rows)
    if backend == "hnsw":
        return build_hnsw(keys, M=M, ef_construction=ef_construction, threads=threads, seed=seed,
                          ef_search=ef_search, progress=progress)
    raise ConfigError(f"unknown index backend {backend!r} (known: {', '.join(BACKENDS)})", "params.yaml",
                      "index.backend")


def index_folder(index: str | os.PathLike, key_set: str = "joint") -> Path:
    """Where the index stage keeps the index over `key_set`."""
    return Path(index) / key_set


def build_memory_indexes(embeddings: str | os.PathLike, out: str | os.PathLike, backend: str,
                         **index_settings) -> dict[str, dict[str, float]]:
    """Build and save one index per key set under `out` (atomically, all or none).

    Returns per key set its number of keys and build seconds."""
    built = {}
    with atomic_dir(out) as folder:
        for key_set in KEY_SETS:
            keys = memory_keys(embeddings, key_set)
            started = time.perf_counter()
            index = make_index(backend, keys, **index_settings)
            built[key_set] = {"keys": len(keys), "build_s": round(time.perf_counter() - started, 2)}
            save_index(index, folder / key_set)
            del index, keys  # one key set in memory at a time
    return built


def load_memory_index(index: str | os.PathLike, embeddings: str | os.PathLike, key_set: str,
                      ef_search: int = PAPER_EF_SEARCH, threads: int = 0) -> ExactIndex | HnswIndex:
    """The saved index over `key_set`. The exact backend keeps no keys, so it reads them from `embeddings`
    (an HNSW graph holds its own and needs none)."""
    folder = index_folder(index, key_set)
    keys = memory_keys(embeddings, key_set) if saved_backend(folder) == "exact" else None
    return load_index(folder, keys=keys, ef_search=ef_search, threads=threads)
