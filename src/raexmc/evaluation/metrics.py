"""Ranking metrics per test input, as the XC Repository (pyxclib) defines them: P@k, nDCG@k, R@k, PSP@k, and
macro-F1@k per label-frequency segment (the paper's Table 4), from top-k label indices, never a dense inputs x labels
matrix (500k x 1M must fit); the caller drops the filtered pairs first (rae.pairs.remove_pairs). Also an approximate
search's recall of the exact one."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from ..data.stats import SEGMENTS, UNSEEN, segment_of
from ..errors import DataError
from ..rae.pairs import as_pattern, in_pattern, row_chunks, row_ids

KS, RECALL_KS = (1, 3, 5), (10, 100)  # the cut-offs of P, nDCG, PSP, PSnDCG and of R


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


def _ndcg(gains: np.ndarray, n_pos: np.ndarray, k: int) -> np.ndarray:
    """Each row's DCG@k of `gains` over its IDCG@k with unit gains (the first min(k, #positives) discounts), 0 where
    that is 0; DCG a row-wise sum, as a BLAS product's rounding would depend on the chunk."""
    discounts = 1.0 / np.log2(np.arange(2, k + 2))
    idcg = np.concatenate([[0.0], np.cumsum(discounts)])[np.minimum(n_pos, k)]
    return np.divide((gains[:, :k] * discounts).sum(axis=1), idcg, out=np.zeros_like(idcg), where=idcg > 0)


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


def over_mean_ideal(gain: np.ndarray, mean_ideal: float) -> np.ndarray:
    return gain / mean_ideal if mean_ideal > 0 else np.zeros_like(gain)


def _ps_values(gains: np.ndarray, n_pos: np.ndarray, ks: Sequence[int]) -> dict[str, np.ndarray]:
    """PSP@k's and PSnDCG@k's per-input sums of propensity-weighted `gains` (a ranking's, or the ideal one's): the
    numerators or denominators of ratios of means, not means of ratios, as pyxclib defines them: PSP@k = mean_i[1/p
    over i's hits in its top k] / mean_i[i's k largest 1/p over its positives]; PSnDCG@k likewise of PSDCG_i@k /
    IDCG_i@k (IDCG with unit gains). Each input's value is divided by the test set's mean ideal, so the plain mean is
    pyxclib's number and a paired t-test sees every system's numerators scaled alike."""
    return {**{f"PSP@{k}": gains[:, :k].sum(axis=1) for k in ks},
            **{f"PSnDCG@{k}": _ndcg(gains, n_pos, k) for k in ks}}


def propensity_ideals(truth: sp.csr_matrix, propensity: np.ndarray, ks: Sequence[int] = KS) -> dict[str, np.ndarray]:
    """Per input, the denominators of PSP@k and PSnDCG@k: its best ranking's (the truth's alone, so shared)."""
    best = _best_weights(truth, _propensity_weights(truth, propensity), max(ks, default=0))
    return _ps_values(best, np.diff(truth.indptr), ks)


def _propensity_weights(truth: sp.csr_matrix, propensity: np.ndarray) -> np.ndarray:
    propensity = np.asarray(propensity, dtype=np.float64)
    if propensity.shape != (truth.shape[1],) or np.any(propensity <= 0):
        raise DataError(f"propensity must be {truth.shape[1]} positive values")
    return 1.0 / propensity


def per_query_values(ranked: np.ndarray, truth: sp.csr_matrix, ks: Sequence[int] = KS,
                     recall_ks: Sequence[int] = RECALL_KS,
                     propensity: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """`per_instance_metrics` but PSP@k and PSnDCG@k not yet over the mean ideal: a chunk's own values."""
    truth = as_pattern(truth)
    ranked = _to_depth(check_ranked(ranked, truth), max((*ks, *recall_ks), default=0))
    hits = hit_matrix(ranked, truth)
    n_pos = np.diff(truth.indptr)
    out = {**{f"P@{k}": hits[:, :k].sum(axis=1) / k for k in ks}, **{f"nDCG@{k}": _ndcg(hits, n_pos, k) for k in ks}}
    if propensity is not None:  # the numerators of PSP@k and PSnDCG@k
        weight = _propensity_weights(truth, propensity)
        out.update(_ps_values(np.where(hits, weight[np.maximum(ranked, 0)], 0.0), n_pos, ks))
    for k in recall_ks:
        out[f"R@{k}"] = hits[:, :k].sum(axis=1) / np.maximum(n_pos, 1)
    return out


def per_instance_metrics(ranked: np.ndarray, truth: sp.csr_matrix, ks: Sequence[int] = KS,
                         recall_ks: Sequence[int] = RECALL_KS,
                         propensity: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Per test input: P@k, nDCG@k (PSP@k, PSnDCG@k given propensities) at `ks`, R@k at `recall_ks`, each array's
    mean the XC Repository's metric; positions past `ranked`'s width and -1 are misses, rows without positives 0."""
    out = per_query_values(ranked, truth, ks, recall_ks, propensity)
    if propensity is not None:
        for name, ideal in propensity_ideals(as_pattern(truth), propensity, ks).items():
            out[name] = over_mean_ideal(out[name], float(ideal.mean()) if ideal.size else 0.0)
    return out


def percent(mean: float) -> float:
    return round(100.0 * mean, 2) if np.isfinite(mean) else float("nan")


def summarize(per_instance: dict[str, np.ndarray]) -> dict[str, float]:
    """Mean of each metric of `per_instance_metrics`'s whole-test-set arrays, in percent rounded to 0.01."""
    return {name: percent(float(np.mean(values))) if np.size(values) else float("nan")
            for name, values in per_instance.items()}


def macro_f1_by_segment(ranked: np.ndarray, truth: sp.csr_matrix, train_label_freq: np.ndarray,
                        k: int = 5) -> dict[str, float]:
    """Macro-averaged F1 of the top-k per label segment (and unseen) and over all labels: F1_l = 2TP / (2TP + FP +
    FN), labels never predicted nor relevant left out; a segment without a counted label gives nan."""
    truth = as_pattern(truth)
    tp, predicted = f1_counts(ranked, truth, k)
    return macro_f1_from_counts(tp, predicted, np.bincount(truth.indices, minlength=truth.shape[1]), train_label_freq)


def f1_counts(ranked: np.ndarray, truth: sp.csr_matrix, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per label, TP and TP + FP of these inputs' top k: sums, so a test set's add up over its chunks."""
    truth = as_pattern(truth)
    top = check_ranked(ranked, truth)[:, :k]
    hits = hit_matrix(top, truth)
    width = truth.shape[1]
    return np.bincount(top[hits], minlength=width), np.bincount(top[top >= 0], minlength=width)


def macro_f1_from_counts(tp: np.ndarray, predicted: np.ndarray, relevant: np.ndarray,
                         train_label_freq: np.ndarray) -> dict[str, float]:
    """`macro_f1_by_segment` from the test set's per-label TP, TP + FP (`f1_counts`) and TP + FN (`relevant`)."""
    freq = np.asarray(train_label_freq)
    if freq.shape != tp.shape:
        raise DataError(f"train_label_freq has shape {freq.shape}, expected {tp.shape}")
    denominator = predicted + relevant  # = 2TP + FP + FN
    counted = denominator > 0
    f1 = np.divide(2.0 * tp, denominator, out=np.zeros(len(tp)), where=counted)
    segment = segment_of(freq)
    out = {name: _mean_or_nan(f1[counted & (segment == name)]) for name in (*SEGMENTS, UNSEEN)}
    out["all"] = _mean_or_nan(f1[counted])
    return out


def _mean_or_nan(values: np.ndarray) -> float:
    return float(values.mean()) if values.size else float("nan")


def recall_at_k(approx_ids: np.ndarray, exact_ids: np.ndarray) -> float:
    """How much of an exact search an approximate one (HNSW) finds: the mean over queries of the share of exact
    top-k ids it also found; -1 padding ignored, queries without an exact id not counted (1.0 when none has one)."""
    approx_ids, exact_ids = np.asarray(approx_ids, dtype=np.int64), np.asarray(exact_ids, dtype=np.int64)
    if approx_ids.ndim != 2 or exact_ids.ndim != 2 or approx_ids.shape[0] != exact_ids.shape[0]:
        raise DataError(f"id matrices must be 2-D with the same rows, got {approx_ids.shape} and {exact_ids.shape}")
    valid = exact_ids >= 0
    wanted = valid.sum(axis=1)
    if not wanted.any():
        return 1.0
    # Tag each id with its row so one set test covers all queries.
    span = int(max(exact_ids.max(initial=-1), approx_ids.max(initial=-1))) + 2
    rows = np.arange(exact_ids.shape[0], dtype=np.int64)[:, None] * span
    approx_tags = (rows + approx_ids)[approx_ids >= 0]
    hits = valid & np.isin(rows + exact_ids, approx_tags)
    counted = wanted > 0
    return float(np.mean(hits.sum(axis=1)[counted] / wanted[counted]))
