"""Score files: one system's test-set top-k label scores as a sparse N_test x L CSR matrix of float32, saved with
scipy.sparse.save_npz, the format pyxclib and PECOS read and write. The evaluate stage writes one per method
(its own rankings, after the reciprocal-pair filter), and `raexmc evaluate --scores` scores any system's.

A row holds at most k scores, its top k (k = 100: R@100 is the deepest cut-off the metrics need), so a file
grows with the test set, never with the label count. A row's scores strictly decrease in the order
`rae.ranking.top_k` ranked them (ties to the smaller label, broken in the file by an ulp or a few: `ranked_float32`),
so every evaluator that sorts by descending score ranks the file alike.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ..errors import DataError
from ..rae.pairs import row_ids


def ranked_values(scores: sp.csr_matrix | np.ndarray, ranked: np.ndarray) -> np.ndarray:
    """The scores of each row's ranked labels (`ranked`: (N, k) label ids, -1 padded; pads get -inf). A sparse
    matrix's duplicate entries of a label add up, as they do when it is ranked.

    An elementwise product with the ranked pattern keeps the ranked entries alone (at most k a row; a zero it
    drops reads as the 0 it was), then one binary search of int64 keys row * L + label places them. scipy's own
    lookup scans a whole row per label where its indices are unsorted, as a product's are (on rows of 3,000
    entries: 3 s a 2,000-query chunk, a third of ranking it)."""
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
    """`values` (in rank order) as float32 that strictly decrease along each row's ranking, so that any evaluator
    that sorts a row by descending score (PECOS's, pyxclib's) ranks it as the stage did, whatever its own tie
    rule. Where float32 rounding or an exact tie of the model's scores (ranked to the smaller label) leaves a
    label level with the next, it moves up by the fewest ulps that put it above; the scores stay monotone in
    the model's."""
    out = np.asarray(values, dtype=np.float32).copy()
    for j in range(ranked.shape[1] - 2, -1, -1):
        above_next = np.nextafter(out[:, j + 1], np.float32(np.inf))
        out[:, j] = np.where(ranked[:, j + 1] >= 0, np.maximum(out[:, j], above_next), out[:, j])
    return out


class TopScores:
    """One method's top-k label scores, gathered over consecutive chunks of test queries (8 bytes a ranked label:
    the ids and float32 scores, never a dense matrix) until `matrix` stacks them."""

    def __init__(self, num_labels: int):
        self.num_labels = num_labels
        self.counts: list[np.ndarray] = []
        self.ids: list[np.ndarray] = []
        self.values: list[np.ndarray] = []

    def add(self, ranked: np.ndarray, scores: sp.csr_matrix | np.ndarray) -> None:
        """The next chunk's ranking (`ranked`, -1 padded at the end of a row) and the scores it was ranked from."""
        kept = ranked >= 0
        self.counts.append(kept.sum(axis=1))
        self.ids.append(ranked[kept].astype(np.int32))
        self.values.append(ranked_float32(ranked, ranked_values(scores, ranked))[kept])

    def matrix(self) -> sp.csr_matrix:
        """Every chunk's rows as one CSR matrix (labels sorted within a row)."""
        counts = np.concatenate(self.counts) if self.counts else np.zeros(0, np.int64)
        indptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        matrix = sp.csr_matrix((np.concatenate(self.values or [np.zeros(0, np.float32)]),
                                np.concatenate(self.ids or [np.zeros(0, np.int32)]), indptr),
                               shape=(len(counts), self.num_labels))
        matrix.sort_indices()
        return matrix


def save_scores(path: str | os.PathLike, matrix: sp.csr_matrix) -> None:
    """A score file (float32 CSR, scipy.sparse.save_npz) at `path`; the caller writes it inside an atomic folder."""
    sp.save_npz(path, sp.csr_matrix(matrix, dtype=np.float32))


def read_scores(path: str | os.PathLike, num_queries: int, num_labels: int, k: int) -> sp.csr_matrix:
    """The score file `path` for a test set of `num_queries` inputs and `num_labels` labels, as float64 CSR; a file
    that is not one (not a scipy.sparse .npz, wrong shape, a label index out of range, NaN or inf, or more than
    `k` scores in a row: a dense or full matrix) is one DataError naming it. Its scores keep their dtype (a float64
    file's near ties are ranked as they are)."""
    path = Path(path)
    if not path.is_file():
        raise DataError("score file not found", path)
    try:
        matrix = sp.load_npz(path)
    except (OSError, ValueError, KeyError, IndexError, TypeError, EOFError, zipfile.BadZipFile) as exc:
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DataError(f"not a scipy.sparse .npz matrix ({why}): write one with scipy.sparse.save_npz", path) from None
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
