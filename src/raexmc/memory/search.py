"""What every index backend shares: the result format `(ids, sims)` and the checks of what goes in.

* ids: int64 array (n_queries, k), key numbers, -1 where fewer than k keys were found;
* sims: float32 array (n_queries, k), inner products, -inf where the id is -1;

each row sorted by descending similarity, ties by ascending id. The backends are `ExactIndex`
(exact.py), the ground truth and the backend for small data, `HnswIndex` (hnsw.py), an hnswlib
graph for large data, and `FaissIndex` (faiss_index.py), a graph over compressed keys for a memory
with a size budget (`memory.compression`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import DataError

BACKENDS = ("hnsw", "exact")
Hits = tuple[np.ndarray, np.ndarray]  # (ids, sims) of one search


def as_matrix(array: Any, what: str, dim: int | None = None) -> np.ndarray:
    """`array` as a C-contiguous float32 matrix (no copy when it already is one), checked."""
    matrix = np.ascontiguousarray(array, dtype=np.float32)
    if matrix.ndim != 2:
        raise DataError(f"{what} must be a 2-D matrix, got shape {matrix.shape}")
    if dim is not None and matrix.shape[1] != dim:
        raise DataError(f"{what} have dimension {matrix.shape[1]}, the index has {dim}")
    if not np.isfinite(matrix).all():
        raise DataError(f"{what} contain NaN or infinite values")
    return matrix


def empty_result(n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    return np.full((n, k), -1, dtype=np.int64), np.full((n, k), -np.inf, dtype=np.float32)


def sort_rows(ids: np.ndarray, sims: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Order each row by descending similarity, then ascending id (padding last)."""
    order = np.lexsort((ids, -sims), axis=-1)
    return np.take_along_axis(ids, order, axis=1), np.take_along_axis(sims, order, axis=1)
