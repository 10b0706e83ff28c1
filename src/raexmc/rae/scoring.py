"""Retrieved keys to label scores: RAE-XMC's inference (rae/reference.py) sparse and batched. Key ids 0..N-1 are
training inputs, N..N+L-1 labels. `score_parts` computes the two products once per (τ, b), so a λ sweep costs one
sparse addition per point; the real dual encoder and kNN search their own key sets (λ 0 or 1 here is truncated).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from raexmc.checks import positive_int
from raexmc.errors import DataError

PAPER_TAU = 0.04
PAPER_B = 200
PAPER_LAMBDA = 0.5
Parts = tuple[sp.csr_matrix, sp.csr_matrix]


# The settings loader checks infer.lambda, infer.tau and infer.b; these checks of what code hands in are ValueErrors.
def _number(value: object) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return np.nan


def check_lambda(lam: float) -> float:
    if not 0.0 <= _number(lam) <= 1.0:  # also false for nan
        raise ValueError(f"infer.lambda must be a number in [0, 1], got {lam!r}")
    return float(lam)


def check_tau(tau: float) -> float:
    if not 0.0 < _number(tau) < np.inf:
        raise ValueError(f"infer.tau must be a finite number > 0, got {tau!r}")
    return float(tau)


def check_b(b: int | None) -> int | None:
    """b as an int (None: every retrieved key)."""
    return None if b is None else positive_int(b, "infer.b")


def _check_retrieval(ids: np.ndarray, sims: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    ids = np.asarray(ids)
    if ids.ndim != 2:
        raise DataError(f"retrieved ids must be 2-D (queries x keys), got shape {ids.shape}")
    if ids.size and not np.issubdtype(ids.dtype, np.integer):
        raise DataError(f"retrieved ids must be integers, got {ids.dtype}")
    if sims is not None and np.shape(sims) != ids.shape:
        raise DataError(f"retrieved sims have shape {np.shape(sims)}, ids have {ids.shape}")
    return ids.astype(np.int64, copy=False), None if sims is None else np.asarray(sims)


def kept_mask(ids: np.ndarray, sims: np.ndarray | None, b: int | None) -> np.ndarray:
    """Mask of the first b valid entries of each row (valid: id >= 0 and, given sims, sim > -inf)."""
    valid = ids >= 0
    if sims is not None:
        valid &= sims > -np.inf  # nan compares false here and is caught by the caller
    if b is not None and b < ids.shape[1]:
        valid &= np.cumsum(valid, axis=1) <= b
    return valid


def _softmax_entries(sims: np.ndarray, ids: np.ndarray, tau: float, num_keys: int,
                     b: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row, key id, probability) of every kept entry; the row maximum goes before exp, so nothing overflows."""
    tau, b = check_tau(tau), check_b(b)
    ids, sims = _check_retrieval(ids, sims)
    if ids.size and np.isnan(sims[ids >= 0]).any():
        raise DataError("retrieved sims hold nan for a valid key")
    kept = kept_mask(ids, sims, b)
    if np.isposinf(sims[kept]).any():
        raise DataError("retrieved sims hold +inf")
    keys = ids[kept]
    if keys.size and keys.max() >= num_keys:
        raise DataError(f"retrieved key id {int(keys.max())} is outside the memory of {num_keys} keys")
    logits = np.where(kept, sims.astype(np.float64) / tau, -np.inf)
    row_max = logits.max(axis=1, initial=-np.inf, keepdims=True)
    row_max[~np.isfinite(row_max)] = 0.0  # rows with no kept key: their entries all stay 0
    weights = np.exp(logits - row_max)  # exp(-inf) = 0 outside the kept entries
    total = weights.sum(axis=1, keepdims=True)
    np.divide(weights, total, out=weights, where=total > 0)
    return np.nonzero(kept)[0].astype(np.int64), keys, weights[kept]


def _csr(rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, shape: tuple[int, int]) -> sp.csr_matrix:
    """Canonical CSR (sorted indices, duplicates summed) from entries whose rows are sorted."""
    indptr = np.zeros(shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=shape[0]), out=indptr[1:])
    matrix = sp.csr_matrix((vals, cols, indptr), shape=shape)
    matrix.sum_duplicates()  # sorts indices too; an index should never repeat a key anyway
    return matrix


def key_probabilities(sims: np.ndarray, ids: np.ndarray, tau: float, num_keys: int,
                      b: int | None = None) -> sp.csr_matrix:
    """softmax(sims / τ) over each row's first b valid entries as CSR (n, num_keys); over a search of the label
    keys alone (ids 0..L-1), the dual encoder's scores."""
    rows, keys, probs = _softmax_entries(sims, ids, tau, num_keys, b)
    return _csr(rows, keys, probs, (np.shape(ids)[0], int(num_keys)))


def score_parts(ids: np.ndarray, sims: np.ndarray, Y_train: sp.spmatrix | np.ndarray, tau: float,
                b: int | None = None) -> Parts:
    """(knn_part, label_part), CSR (n, L): P[:, :N] @ Y_train and P[:, N:], for `combine` at any λ."""
    Y = sp.csr_matrix(Y_train, dtype=np.float64)
    num_train, num_labels = Y.shape
    rows, keys, probs = _softmax_entries(sims, ids, tau, num_train + num_labels, b)
    is_train, n = keys < num_train, np.shape(ids)[0]
    p_train = _csr(rows[is_train], keys[is_train], probs[is_train], (n, num_train))
    p_label = _csr(rows[~is_train], keys[~is_train] - num_train, probs[~is_train], (n, num_labels))
    knn_part = sp.csr_matrix(p_train @ Y)
    knn_part.sum_duplicates()  # a product's indices come unsorted: sorted once here, every combine adds in order
    return knn_part, p_label


def combine(parts: Parts, lam: float) -> sp.csr_matrix:
    """lam * knn_part + (1 - lam) * label_part for a checked lam, storing exactly the nonzero scores (ranking reads
    the stored entries)."""
    knn_part, label_part = parts
    if knn_part.shape != label_part.shape:
        raise DataError(f"score parts have shapes {knn_part.shape} and {label_part.shape}")
    if lam in (0.0, 1.0):
        scores = sp.csr_matrix(knn_part if lam == 1.0 else label_part, copy=True)
    else:
        scores = sp.csr_matrix(lam * knn_part + (1.0 - lam) * label_part)
    scores.sum_duplicates()
    scores.eliminate_zeros()
    return scores


def knn_scores(ids: np.ndarray, sims: np.ndarray, Y_train: sp.spmatrix | np.ndarray, tau: float = PAPER_TAU,
               b: int | None = None) -> sp.csr_matrix:
    """kNN from its own search of the training-input keys (ids 0..N-1)."""
    Y = sp.csr_matrix(Y_train, dtype=np.float64)
    return sp.csr_matrix(key_probabilities(sims, ids, tau, Y.shape[0], b) @ Y)


def ova_knn_scores(x_ids: np.ndarray, x_sims: np.ndarray, z_ids: np.ndarray, z_sims: np.ndarray,
                   Y_train: sp.spmatrix | np.ndarray, lam: float = PAPER_LAMBDA, tau: float = PAPER_TAU,
                   b: int | None = None) -> sp.csr_matrix:
    """The paper's OvA+kNN ablation (Eq. 12): kNN and the dual encoder, each its own search, mixed afterwards."""
    lam = check_lambda(lam)  # before the two softmaxes' work
    if np.shape(x_ids)[0] != np.shape(z_ids)[0]:
        raise DataError(f"the two searches have {np.shape(x_ids)[0]} and {np.shape(z_ids)[0]} queries")
    Y = sp.csr_matrix(Y_train, dtype=np.float64)
    return combine((knn_scores(x_ids, x_sims, Y, tau, b), key_probabilities(z_sims, z_ids, tau, Y.shape[1], b)), lam)


def train_key_counts(ids: np.ndarray, num_train: int, b: int | None = None) -> np.ndarray:
    """[training-input keys, all valid keys] among the queries' first b valid keys: sums add up over chunks."""
    ids, _ = _check_retrieval(ids, None)
    kept = kept_mask(ids, None, check_b(b))
    return np.array([(kept & (ids < num_train)).sum(), kept.sum()], dtype=np.int64)
