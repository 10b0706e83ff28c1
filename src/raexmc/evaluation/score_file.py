"""Score files: one system's test-set top-k (100) label scores as an N_test x L float32 CSR (scipy.sparse.save_npz),
as pyxclib and PECOS read them; a row's scores strictly decrease in `rae.ranking.top_k`'s order (`ranked_float32`),
so every evaluator that sorts by descending score ranks the file alike."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..errors import DataError, first_line
from ..rae.pairs import row_ids


def ranked_values(scores: sp.csr_matrix | np.ndarray, ranked: np.ndarray) -> np.ndarray:
    """The scores of each row's ranked labels (-1 pads get -inf), duplicates added as ranking adds them: one binary
    search of row * L + label keys, as scipy's own lookup scans a whole unsorted row per label."""
    rows, cols = np.nonzero(ranked >= 0)
    labels = ranked[rows, cols]
    values = np.full(ranked.shape, -np.inf)
    if not sp.issparse(scores):
        values[rows, cols] = np.asarray(scores)[rows, labels]
        return values
    kept = sp.csr_matrix(sp.csr_matrix(scores).multiply(
        sp.csr_matrix((np.ones(rows.size), (rows, labels)), shape=scores.shape)))
    width = np.int64(scores.shape[1])
    wanted = rows.astype(np.int64) * width + labels
    order = np.argsort(wanted)
    found = np.empty(wanted.size)
    found[order] = np.bincount(np.searchsorted(wanted[order], row_ids(kept.indptr) * width + kept.indices),
                               weights=kept.data, minlength=wanted.size)
    values[rows, cols] = found
    return values


def ranked_float32(ranked: np.ndarray, values: np.ndarray) -> np.ndarray:
    """`values` (in rank order) as float32 strictly decreasing along each row: a label level with the next (float32
    rounding, or a tie) moves up the fewest ulps that put it above."""
    out = np.asarray(values, dtype=np.float32).copy()
    for j in range(ranked.shape[1] - 2, -1, -1):
        above_next = np.nextafter(out[:, j + 1], np.float32(np.inf))
        out[:, j] = np.where(ranked[:, j + 1] >= 0, np.maximum(out[:, j], above_next), out[:, j])
    return out


class TopScores:
    """One method's top-k label scores over consecutive chunks of test queries (ids and float32 scores)."""

    def __init__(self, num_labels: int):
        self.num_labels = num_labels
        self.counts, self.ids, self.values = [], [], []  # per chunk: each row's kept labels, their ids and scores

    def add(self, ranked: np.ndarray, scores: sp.csr_matrix | np.ndarray) -> None:
        kept = ranked >= 0
        self.counts.append(kept.sum(axis=1))
        self.ids.append(ranked[kept].astype(np.int32))
        self.values.append(ranked_float32(ranked, ranked_values(scores, ranked))[kept])

    def matrix(self) -> sp.csr_matrix:
        counts = np.concatenate(self.counts) if self.counts else np.zeros(0, np.int64)
        indptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        matrix = sp.csr_matrix((np.concatenate(self.values or [np.zeros(0, np.float32)]),
                                np.concatenate(self.ids or [np.zeros(0, np.int32)]), indptr),
                               shape=(len(counts), self.num_labels))
        matrix.sort_indices()
        return matrix


def save_scores(path: str | os.PathLike, matrix: sp.csr_matrix) -> None:
    sp.save_npz(path, sp.csr_matrix(matrix, dtype=np.float32))


def read_scores(path: str | os.PathLike, num_queries: int, num_labels: int, k: int) -> sp.csr_matrix:
    """The score file `path` for a `num_queries` x `num_labels` test set, as CSR in its own dtype; a bad one (not a
    sparse .npz, wrong shape, a label out of range, NaN or inf, over `k` scores a row) is one DataError."""
    path = Path(path)
    if not path.is_file():
        raise DataError("score file not found", path)
    try:
        matrix = sp.load_npz(path)
    except (OSError, ValueError, KeyError, IndexError, TypeError, EOFError, zipfile.BadZipFile) as exc:
        raise DataError(f"not a scipy.sparse .npz matrix ({first_line(exc)}): write one with scipy.sparse.save_npz",
                        path) from None
    if matrix.shape != (num_queries, num_labels):
        raise DataError(f"shape {matrix.shape[0]} x {matrix.shape[1]}, but the test set has {num_queries} inputs "
                        f"and {num_labels} labels: give one row per test input, one column per label", path)
    matrix = matrix.tocsr()
    outside = np.flatnonzero((matrix.indices < 0) | (matrix.indices >= num_labels))
    if outside.size:
        row = int(np.searchsorted(matrix.indptr, outside[0], side="right")) - 1
        raise DataError(f"label index {int(matrix.indices[outside[0]])} outside [0, {num_labels})", path,
                        f"row {row}")
    bad = np.flatnonzero(~np.isfinite(matrix.data))
    if bad.size:
        row = int(np.searchsorted(matrix.indptr, bad[0], side="right")) - 1
        raise DataError(f"score {matrix.data[bad[0]]} of label {int(matrix.indices[bad[0]])}: scores must be finite",
                        path, f"row {row}")
    widths = np.diff(matrix.indptr)
    if widths.size and widths.max() > k:
        row = int(widths.argmax())
        raise DataError(f"{int(widths[row])} scores in a row, more than k = {k}: keep each row's top {k} (a dense or "
                        f"full matrix is not a score file; R@{k} is the deepest cut-off)", path, f"row {row}")
    return matrix
