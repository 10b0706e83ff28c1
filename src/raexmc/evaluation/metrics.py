"""Ranking metrics per test input, as the XC Repository (pyxclib) defines them: P@k, nDCG@k, R@k, PSP@k.

Everything works from top-k label indices, never from a dense test-inputs x labels matrix, so that
500k test inputs x 1M labels fit in memory. Work is done in chunks of rows, vectorised within each.

The caller applies the filtered pairs before computing metrics: they are never ranked
(`rae.ranking.top_k(..., exclude=...)`) and never positives (`rae.pairs.remove_pairs`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from ..errors import DataError
from ..rae.pairs import as_pattern, in_pattern, row_chunks, row_ids


def check_ranked(ranked: np.ndarray, truth: sp.csr_matrix) -> np.ndarray:
    ranked = np.asarray(ranked)
    if ranked.ndim != 2 or ranked.shape[0] != truth.shape[0]:
        raise DataError(f"ranked has shape {ranked.shape}, expected ({truth.shape[0]}, k)")
    if ranked.size and (ranked.min() < -1 or ranked.max() >= truth.shape[1]):
        raise DataError(f"ranked holds label indices outside [-1, {truth.shape[1]})")
    return ranked.astype(np.int64, copy=False)


def _to_depth(ranked: np.ndarray, depth: int) -> np.ndarray:
    """The first `depth` columns of `ranked`, padded with -1 (a miss) where it is shorter."""
    if ranked.shape[1] >= depth:
        return ranked[:, :depth]
    pad = np.full((ranked.shape[0], depth - ranked.shape[1]), -1, dtype=np.int64)
    return np.hstack([ranked, pad])


def hit_matrix(ranked: np.ndarray, truth: sp.csr_matrix) -> np.ndarray:
    """Boolean array like `ranked`: True where the label is a positive of its row; -1 never is."""
    hits = np.zeros(ranked.shape, dtype=bool)
    width = max(ranked.shape[1], 1)
    for start, stop in row_chunks(np.arange(ranked.shape[0] + 1, dtype=np.int64) * width):
        block = ranked[start:stop]
        rows, cols = np.nonzero(block >= 0)
        hits[start + rows, cols] = in_pattern(rows, block[rows, cols], truth[start:stop])
    return hits


def _discounts(k: int) -> np.ndarray:
    """DCG weights 1/log2(j + 1) of ranking positions j = 1..k."""
    return 1.0 / np.log2(np.arange(2, k + 2))


def _idcg(n_pos: np.ndarray, k: int) -> np.ndarray:
    """Each row's best DCG@k with unit gains: the first min(k, #positives) discounts."""
    return np.concatenate([[0.0], np.cumsum(_discounts(k))])[np.minimum(n_pos, k)]


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator elementwise, 0 where the denominator is 0."""
    return np.divide(numerator, denominator, out=np.zeros_like(numerator), where=denominator > 0)


def _ndcg(hits: np.ndarray, n_pos: np.ndarray, k: int) -> np.ndarray:
    return _ratio(hits[:, :k] @ _discounts(k), _idcg(n_pos, k))


def _best_weights(truth: sp.csr_matrix, weight: np.ndarray, depth: int) -> np.ndarray:
    """(N, depth): each row's positive weights, largest first, padded with 0 (the ideal ranking)."""
    rows, pos_weight = row_ids(truth.indptr), weight[truth.indices]
    order = np.lexsort((-pos_weight, rows))
    rows, pos_weight = rows[order], pos_weight[order]
    rank = np.arange(rows.size) - truth.indptr[rows]
    best = np.zeros((truth.shape[0], depth))
    kept = rank < depth
    best[rows[kept], rank[kept]] = pos_weight[kept]
    return best


def _over_mean_ideal(gain: np.ndarray, ideal: np.ndarray) -> np.ndarray:
    """gain / mean(ideal): values whose mean over the test set is mean(gain) / mean(ideal)."""
    mean_ideal = float(ideal.mean()) if ideal.size else 0.0
    return gain / mean_ideal if mean_ideal > 0 else np.zeros_like(gain)


def _propensity_scored(
    ranked: np.ndarray,
    hits: np.ndarray,
    truth: sp.csr_matrix,
    propensity: np.ndarray,
    ks: Sequence[int],
) -> dict[str, np.ndarray]:
    """PSP@k and PSnDCG@k as pyxclib (the XC Repository) defines them: ratios of means.

    PSP@k = mean_i[sum of 1/p over the hits in i's top k] / mean_i[sum of i's k largest 1/p over
    its positives] (the 1/k of both cancels). PSnDCG@k = mean_i[PSDCG_i@k / IDCG_i@k] /
    mean_i[best PSDCG_i@k / IDCG_i@k], with 1/p as gains and IDCG_i@k the unit-gain one.
    This is not the mean of per-input ratios. Each input's value is its numerator divided by the
    test set's mean ideal, so that the plain mean over the test set is pyxclib's number, and a
    paired t-test sees the per-input numerators scaled by a factor that is the same for every
    system ranked on this test set (t and p are unchanged by it). The mean over a subset of the
    inputs is not that subset's PSP@k: compute the metrics on the subset instead.
    """
    propensity = np.asarray(propensity, dtype=np.float64)
    if propensity.shape != (truth.shape[1],) or np.any(propensity <= 0):
        raise DataError(f"propensity must be {truth.shape[1]} positive values")
    weight = 1.0 / propensity
    gained = np.where(hits, weight[np.maximum(ranked, 0)], 0.0)
    best = _best_weights(truth, weight, max(ks, default=0))
    n_pos = np.diff(truth.indptr)
    out = {}
    for k in ks:
        out[f"PSP@{k}"] = _over_mean_ideal(gained[:, :k].sum(axis=1), best[:, :k].sum(axis=1))
    for k in ks:
        idcg = _idcg(n_pos, k)
        out[f"PSnDCG@{k}"] = _over_mean_ideal(
            _ratio(gained[:, :k] @ _discounts(k), idcg), _ratio(best[:, :k] @ _discounts(k), idcg)
        )
    return out


def per_instance_metrics(
    ranked: np.ndarray,
    truth: sp.csr_matrix,
    ks: Sequence[int] = (1, 3, 5),
    recall_ks: Sequence[int] = (10, 100),
    propensity: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Per test input: P@k, nDCG@k (PSP@k, PSnDCG@k given propensities) at `ks`, R@k at `recall_ks`.

    Kept per input, not averaged, so that systems can be compared with paired tests; the mean of
    every array over the whole test set is the XC Repository's metric (PSP@k and PSnDCG@k are
    ratios of means, see `_propensity_scored`). `truth` must already be without filtered pairs
    (see `remove_pairs`); nonzeros are positives. Ranking positions beyond `ranked`'s width, and
    -1 padding, count as misses. Rows with no positive get 0.
    """
    truth = as_pattern(truth)
    ranked = _to_depth(check_ranked(ranked, truth), max((*ks, *recall_ks), default=0))
    hits = hit_matrix(ranked, truth)
    n_pos = np.diff(truth.indptr)
    out: dict[str, np.ndarray] = {}
    for k in ks:
        out[f"P@{k}"] = hits[:, :k].sum(axis=1) / k
    for k in ks:
        out[f"nDCG@{k}"] = _ndcg(hits, n_pos, k)
    if propensity is not None:
        out.update(_propensity_scored(ranked, hits, truth, propensity, ks))
    for k in recall_ks:
        out[f"R@{k}"] = hits[:, :k].sum(axis=1) / np.maximum(n_pos, 1)
    return out


def summarize(per_instance: dict[str, np.ndarray]) -> dict[str, float]:
    """Mean of each metric over test inputs, as a percentage rounded to two decimals.

    `per_instance` must hold whole-test-set arrays from `per_instance_metrics`: their plain means
    are the XC Repository's metrics, PSP@k's ratio of means included.
    """
    return {
        name: round(100.0 * float(np.mean(values)), 2) if np.size(values) else float("nan")
        for name, values in per_instance.items()
    }
