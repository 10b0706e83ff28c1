"""Top-k labels per input from sparse or dense scores, ties to the smaller label, filtered pairs never ranked."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..errors import DataError
from .pairs import as_pattern, check_same_shape, in_pattern, row_chunks, row_ids

_PAD_LIMIT = 4   # the padded matrix of wide rows may hold at most this many cells per candidate


def top_k(scores: sp.csr_matrix | np.ndarray, k: int, exclude: sp.csr_matrix | None = None) -> np.ndarray:
    """Top-k labels per row, best first, (N, k) int64 padded with -1; ties to the smaller label. For sparse
    scores only stored entries are candidates; `exclude`'s nonzeros are never returned; NaN ranks as -inf."""
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    sparse = sp.issparse(scores)
    scores = scores.tocsr() if sparse else np.asarray(scores)
    if scores.ndim != 2:
        raise DataError(f"scores must be 2-D, got shape {scores.shape}")
    n, width = scores.shape
    banned = None
    if exclude is not None:
        check_same_shape("exclude", exclude, scores.shape)
        banned = as_pattern(exclude)
    out = np.full((n, k), -1, dtype=np.int64)
    cost = scores.indptr if sparse else np.arange(n + 1, dtype=np.int64) * max(width, 1)
    for start, stop in row_chunks(cost):
        part = None if banned is None else banned[start:stop]
        if sparse:
            rows, cols, vals = _sparse_candidates(scores[start:stop], part)
            rows, cols, vals = _row_top_candidates(rows, cols, vals, stop - start, k)
        else:
            rows, cols, vals = _dense_candidates(scores[start:stop], k, part)
        _fill_ranking(out[start:stop], rows, cols, vals)
    return out


def _sparse_candidates(block: sp.csr_matrix, banned: sp.csr_matrix | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row, label, score) of every stored score not in `banned`."""
    if not block.has_canonical_format:
        block.sum_duplicates()  # `block` is a row slice, hence a private copy
    rows, cols, vals = row_ids(block.indptr), block.indices, _nan_last(block.data)
    if banned is not None:
        keep = ~in_pattern(rows, cols, banned)
        rows, cols, vals = rows[keep], cols[keep], vals[keep]
    return rows, cols, vals


def _nan_last(scores: np.ndarray) -> np.ndarray:
    """`scores` with NaN as -inf: NaN compares false, so the k-th threshold and sorts would misplace candidates."""
    nan = np.isnan(scores)
    return np.where(nan, -np.inf, scores) if nan.any() else scores


def _row_top_candidates(rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, n_rows: int,
                        k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The candidates that can reach their row's top k (ties included); all where padding would outgrow them."""
    threshold = _kth_largest(rows, vals, n_rows, k)
    if threshold is None:
        return rows, cols, vals
    keep = vals >= threshold[rows]
    return rows[keep], cols[keep], vals[keep]


def _kth_largest(rows: np.ndarray, vals: np.ndarray, n_rows: int, k: int) -> np.ndarray | None:
    """Each row's k-th largest value (-inf in a row of k or fewer), by np.partition of a padded matrix (sorting
    every candidate was most of evaluate's time); None where k is 0, no row is wider or padding would outgrow."""
    widths = np.bincount(rows, minlength=n_rows)   # rows arrive sorted, so each row's candidates are contiguous
    wide = widths > k
    n_wide, width = int(wide.sum()), int(widths.max(initial=0))
    if k == 0 or n_wide == 0 or n_wide * width > _PAD_LIMIT * rows.size:
        return None
    starts = np.cumsum(widths) - widths
    cell = np.arange(rows.size) + np.repeat((np.cumsum(wide) - 1) * width - starts, widths)  # its padded cell
    in_wide = np.repeat(wide, widths)
    padded = np.full(n_wide * width, -np.inf)
    padded[cell[in_wide]] = vals[in_wide]
    threshold = np.full(n_rows, -np.inf)
    threshold[wide] = np.partition(padded.reshape(n_wide, width), width - k, axis=1)[:, width - k]
    return threshold


def top_k_parts(parts: tuple[sp.csr_matrix, sp.csr_matrix], k: int,
                exclude: sp.csr_matrix | None = None) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """RAE's score halves (rae.scoring.score_parts) cut to what can reach a row's top k at any λ in [0, 1]: every label
    the label half scores, and of the labels the kNN half alone scores (a), those not excluded at or above their
    row's k-th largest a less 4 ulps. λ·a keeps their order but may round neighbours to a tie, which 4 ulps cover;
    so a λ sweep ranks about k + b entries a query instead of every label of the retrieved inputs, in the same order."""
    knn, label = parts
    rows = row_ids(knn.indptr)
    in_label = in_pattern(rows, knn.indices, as_pattern(label))
    allowed = np.ones(knn.nnz, dtype=bool) if exclude is None else ~in_pattern(rows, knn.indices, as_pattern(exclude))
    alone = ~in_label & allowed
    kth = _kth_largest(rows[alone], knn.data[alone], knn.shape[0], k)
    if kth is None:
        return parts
    keep = in_label | (alone & (knn.data >= (kth - 4 * np.finfo(np.float64).eps * np.abs(kth))[rows]))
    indptr = np.concatenate(([0], np.cumsum(np.bincount(rows[keep], minlength=knn.shape[0]))))
    return sp.csr_matrix((knn.data[keep], knn.indices[keep], indptr), shape=knn.shape), label


def _dense_candidates(block: np.ndarray, k: int,
                      banned: sp.csr_matrix | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row, label, score) of the entries at or above their row's k-th best allowed score."""
    block = _nan_last(block)
    allowed = np.ones(block.shape, dtype=bool) if banned is None else banned.toarray() == 0
    keep = allowed
    width = block.shape[1]
    if 0 < k < width:
        masked = np.where(allowed, block.astype(np.float64), -np.inf)
        kth = np.partition(masked, width - k, axis=1)[:, width - k]
        keep = allowed & (masked >= kth[:, None])
    rows, cols = np.nonzero(keep)
    return rows, cols, block[rows, cols]


def _fill_ranking(out: np.ndarray, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray) -> None:
    """Write each row's best labels into `out`, score descending, label ascending (a stable argsort keeps ties)."""
    n, k = out.shape
    widths = np.bincount(rows, minlength=n)
    width = int(widths.max(initial=0))
    if width == 0 or k == 0:
        return
    starts = np.cumsum(widths) - widths
    if n * width > _PAD_LIMIT * rows.size:
        order = np.lexsort((-vals.astype(np.float64), rows))
        pos = np.arange(rows.size) - starts[rows]
        top = pos < k
        out[rows[top], pos[top]] = cols[order][top]
        return
    padded = np.full((n, width), np.inf)
    padded[rows, np.arange(rows.size) - starts[rows]] = -vals.astype(np.float64)
    ranked = np.argsort(padded, axis=1, kind="stable")[:, :k]   # a row's pads (+inf) come after its candidates
    filled = np.arange(ranked.shape[1]) < widths[:, None]
    out[:, :ranked.shape[1]][filled] = cols[(starts[:, None] + ranked)[filled]]
