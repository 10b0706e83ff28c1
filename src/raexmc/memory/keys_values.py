"""The knowledge memory: keys K = [X_train; Z_labels], their values, and the key sets each method searches.

Key ids 0..N-1 are training inputs, N..N+L-1 labels. RAE searches the joint keys; its baselines
search their own key sets, so that a dual encoder is a top-b over the label keys alone and kNN a
top-b over the training-input keys alone (on the joint top-b, input keys can crowd labels out).
The index stage builds one index per key set in a sub-folder of its output, named as in KEY_SETS.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..encoder.embedding import load_embeddings
from ..errors import ConfigError
from ..io import atomic_dir
from .hnsw import ExactIndex, HnswIndex, load_index, make_index, save_index, saved_backend

# Key set -> the embedding splits it stacks, in key-id order.
KEY_SETS: dict[str, tuple[str, ...]] = {
    "joint": ("train", "labels"),    # RAE: K = [X_train; Z_labels]
    "labels": ("labels",),           # the dual encoder
    "inputs": ("train",),            # kNN over training inputs
}
RELEVANCE = ("binary", "graded")


def memory_keys(embeddings: str | os.PathLike, key_set: str = "joint") -> np.ndarray:
    """The keys of `key_set` as one float32 matrix, stacked in key-id order."""
    parts = [load_embeddings(embeddings, split) for split in KEY_SETS[key_set]]
    keys = np.empty((sum(len(part) for part in parts), parts[0].shape[1]), dtype=np.float32)
    start = 0
    for part in parts:
        keys[start:start + len(part)] = part
        start += len(part)
    return keys


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
                      ef_search: int = 300, threads: int = 0) -> ExactIndex | HnswIndex:
    """The saved index over `key_set`. The exact backend keeps no keys, so it reads them from `embeddings`
    (an HNSW graph holds its own and needs none)."""
    folder = index_folder(index, key_set)
    keys = memory_keys(embeddings, key_set) if saved_backend(folder) == "exact" else None
    return load_index(folder, keys=keys, ef_search=ef_search, threads=threads)


def training_values(Y_train: sp.spmatrix, relevance: str = "binary") -> sp.csr_matrix:
    """The values' input part: binary Y_train as in the paper, or the stored relevance when "graded"."""
    if relevance not in RELEVANCE:
        raise ConfigError(f"infer.relevance must be one of {', '.join(RELEVANCE)}, got {relevance!r}",
                          "params.yaml", "infer.relevance")
    values = sp.csr_matrix(Y_train, dtype=np.float64, copy=True)
    values.eliminate_zeros()
    if relevance == "binary":
        values.data[:] = 1.0
    return values
