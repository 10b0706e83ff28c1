"""(input, label) pairs in sparse label matrices: a filtered ("reciprocal") pair is never predicted nor a positive;
large matrices go in chunks of rows, vectorised within each.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import scipy.sparse as sp

from ..errors import DataError

# Rough number of matrix entries handled at once; bounds temporary memory to some 100 MB.
_CHUNK_ENTRIES = 1 << 22


def as_pattern(matrix: sp.spmatrix | sp.sparray) -> sp.csr_matrix:
    """Canonical CSR copy holding 1.0 where `matrix` is nonzero: no duplicates, sorted indices."""
    pattern = sp.csr_matrix(matrix, dtype=np.float64, copy=True)
    pattern.sum_duplicates()
    pattern.eliminate_zeros()
    pattern.data[:] = 1.0
    return pattern


def row_ids(indptr: np.ndarray) -> np.ndarray:
    """Row index of every stored entry of a CSR matrix."""
    return np.repeat(np.arange(len(indptr) - 1, dtype=np.int64), np.diff(indptr))


def in_pattern(rows: np.ndarray, cols: np.ndarray, pattern: sp.csr_matrix) -> np.ndarray:
    """True where (rows[i], cols[i]) is stored in canonical CSR `pattern`: one binary search of the keys row·L + col,
    of the pattern's fewer keys in increasing ones (a score matrix's entries), else of the asked keys in its own."""
    width = np.int64(pattern.shape[1])
    stored = row_ids(pattern.indptr) * width + pattern.indices
    keys = rows.astype(np.int64) * width + cols
    if stored.size < keys.size and np.all(keys[1:] > keys[:-1]):
        found = np.zeros(keys.shape, dtype=bool)
        pos = np.searchsorted(keys, stored)
        inside = pos < keys.size
        pos = pos[inside]
        found[pos[keys[pos] == stored[inside]]] = True
        return found
    pos = np.searchsorted(stored, keys)
    found = np.zeros(keys.shape, dtype=bool)
    inside = pos < stored.size
    found[inside] = stored[pos[inside]] == keys[inside]
    return found


def row_chunks(cost_cumsum: np.ndarray) -> Iterator[tuple[int, int]]:
    """Split rows into (start, stop) runs costing about _CHUNK_ENTRIES each (at least one row)."""
    n = len(cost_cumsum) - 1
    start = 0
    while start < n:
        limit = cost_cumsum[start] + _CHUNK_ENTRIES
        stop = int(np.searchsorted(cost_cumsum, limit, side="right")) - 1
        stop = min(max(stop, start + 1), n)
        yield start, stop
        start = stop


def check_same_shape(name: str, matrix: sp.spmatrix | sp.sparray, shape: tuple[int, ...]) -> None:
    if matrix.shape != shape:
        raise DataError(f"{name} has shape {matrix.shape}, expected {shape}")


def remove_pairs(truth: sp.csr_matrix, exclude: sp.csr_matrix) -> sp.csr_matrix:
    """Truth without `exclude`'s nonzeros (a filtered pair is no positive), a chunk of rows at a time."""
    truth = sp.csr_matrix(truth)
    check_same_shape("exclude", exclude, truth.shape)
    banned = as_pattern(exclude)
    keep = np.empty(truth.nnz, dtype=bool)
    kept = np.zeros(truth.shape[0], dtype=np.int64)
    for start, stop in row_chunks(truth.indptr):
        entries = slice(truth.indptr[start], truth.indptr[stop])
        rows = row_ids(truth.indptr[start:stop + 1])
        keep[entries] = ~in_pattern(rows, truth.indices[entries], banned[start:stop])
        kept[start:stop] = np.bincount(rows[keep[entries]], minlength=stop - start)
    indptr = np.zeros(truth.shape[0] + 1, dtype=np.int64)
    np.cumsum(kept, out=indptr[1:])
    return sp.csr_matrix((truth.data[keep], truth.indices[keep], indptr), shape=truth.shape)
