"""Macro-F1@k per label-frequency segment (the paper's Table 4): how head, torso, tail and xtail labels fare."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..data.stats import SEGMENTS, UNSEEN, segment_of
from ..errors import DataError
from ..rae.pairs import as_pattern
from .metrics import check_ranked, hit_matrix


def macro_f1_by_segment(
    ranked: np.ndarray, truth: sp.csr_matrix, train_label_freq: np.ndarray, k: int = 5
) -> dict[str, float]:
    """Macro-averaged F1 of the top-k predictions, per label segment and over all labels.

    For each label l, over all test inputs: TP = inputs with l among their top k and in their
    truth, FP = top k but not truth, FN = truth but not top k (-1 padding is no prediction).
    F1_l = 2TP / (2TP + FP + FN). Labels with TP + FP + FN = 0 (never predicted nor relevant) are
    left out, and the remaining F1_l are averaged within each segment ("head", "torso", "tail",
    "xtail", and "unseen" for labels with zero training inputs, which is never folded into xtail)
    and over all of them ("all"). A segment without any counted label gives nan. `truth` must
    already be without filtered pairs (see `remove_pairs`).
    """
    truth = as_pattern(truth)
    tp, predicted = f1_counts(ranked, truth, k)
    return macro_f1_from_counts(tp, predicted, np.bincount(truth.indices, minlength=truth.shape[1]), train_label_freq)


def f1_counts(ranked: np.ndarray, truth: sp.csr_matrix, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per label, how many of these inputs rank it in their top k and have it in their truth (TP), and how many
    rank it there at all (TP + FP): sums over inputs, so a test set's counts add up over its chunks."""
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
