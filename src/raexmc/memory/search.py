"""What every index backend shares: ids int64 (n, k), -1 where fewer than k keys were found; sims float32 inner
products, -inf there; rows by descending similarity, ties by ascending id, so every backend reads alike."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import numpy as np

from ..checks import positive_int
from ..errors import DataError
from ..settings import IndexBackend

BACKENDS = get_args(IndexBackend)
# `index.backend: auto` searches exactly up to this many joint keys: exact costs a query about keys / 8e7 s on 2
# threads, HNSW runs 2,790 - 1,680 * log10(keys / 20,241) queries/s (bench/results/hnsw_vs_exact_*.json): they cross
# near 35,000 keys before HNSW's build; below, exact is as fast, has recall 1 and is the same on every run.
EXACT_MAX_KEYS = 30_000

Hits = tuple[np.ndarray, np.ndarray]  # (ids, sims) of one search


def as_matrix(array: Any, what: str, dim: int | None = None, index: Path | None = None) -> np.ndarray:
    """`array` as a C-contiguous float32 matrix (no copy when it is one); a wrong `dim` names the folder `index`."""
    matrix = np.ascontiguousarray(array, dtype=np.float32)
    if matrix.ndim != 2:
        raise DataError(f"{what} must be a 2-D matrix, got shape {matrix.shape}")
    if dim is not None and matrix.shape[1] != dim:
        raise DataError(f"{what} have dimension {matrix.shape[1]}, the index has {dim}", index)
    if not np.isfinite(matrix).all():
        raise DataError(f"{what} contain NaN or infinite values")
    return matrix


def keys_to_index(keys: Any) -> np.ndarray:
    """`keys` checked as as_matrix does, and refused when there are none (hnswlib and faiss build no empty graph)."""
    keys = as_matrix(keys, "keys")
    if keys.shape[0] == 0:
        raise DataError("no keys to index")
    return keys


class Index:
    """`search`'s checks, blocks and padding, one loop for every backend; a backend brings its kernel, `_block`
    (rows sorted as sort_rows leaves them unless `sorts_after`). `source`: the folder its errors name."""

    source: Path | None = None
    count: int
    dim: int
    query_block: int
    backend: str
    sorts_after = False
    shown: tuple[str, ...] = ("dim",)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{name}={getattr(self, name)!r}' for name in self.shown)})"

    def checked_queries(self, queries: Any) -> np.ndarray:
        return as_matrix(queries, "queries", self.dim, self.source)

    def search(self, queries: np.ndarray, k: int, progress: bool = False, **options) -> Hits:
        """The top-k keys of each query; rows it cannot fill are padded, never dropped."""
        k = positive_int(k, "k")
        queries = self.checked_queries(queries)
        ids, sims = empty_result(queries.shape[0], k)
        if self.count == 0 or queries.shape[0] == 0:
            return ids, sims
        width = min(k, self.count)
        for start in query_blocks(queries.shape[0], self.query_block, progress, f"{self.backend} search"):
            rows = slice(start, start + self.query_block)
            ids[rows, :width], sims[rows, :width] = self._block(queries[rows], width, k, **options)
        return sort_rows(ids, sims) if self.sorts_after else (ids, sims)

    def _block(self, queries: np.ndarray, width: int, k: int) -> Hits:
        """The `width` best keys of each of a block of queries (k: what the caller asked, which sets a beam)."""
        raise NotImplementedError


def power_of_two_rows(budget: int, row_bytes: int, max_rows: int) -> int:
    """The rows `budget` holds, in [1, max_rows], as a power of two: the two key sets' blocks then align."""
    rows = max(1, min(max_rows, budget // max(row_bytes, 1)))
    return 1 << (rows.bit_length() - 1)


def query_blocks(n: int, rows: int, progress: bool, desc: str = "exact search", unit: str = "query") -> Iterator[int]:
    """The first of each block of `rows` of `n`, with a progress bar (a mining round at scale takes hours)."""
    from ..progress import progress_bar

    with progress_bar(total=n, desc=desc, unit=unit, disable=not progress) as bar:
        for start in range(0, n, rows):
            yield start
            bar.update(min(rows, n - start))


def key_blocks(keys: np.ndarray, rows: int, desc: str, progress: bool) -> Iterator[tuple[int, np.ndarray]]:
    """(first id, block) of `keys`, `rows` at a time, with a progress bar of the keys inserted."""
    return ((start, keys[start:start + rows]) for start in query_blocks(len(keys), rows, progress, desc, "key"))


def empty_result(n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    return np.full((n, k), -1, dtype=np.int64), np.full((n, k), -np.inf, dtype=np.float32)


def sort_rows(ids: np.ndarray, sims: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Order each row by descending similarity, then ascending id (padding last)."""
    order = np.lexsort((ids, -sims), axis=-1)
    return np.take_along_axis(ids, order, axis=1), np.take_along_axis(sims, order, axis=1)
