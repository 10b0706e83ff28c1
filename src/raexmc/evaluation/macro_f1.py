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
    freq = np.asarray(train_label_freq)
    if freq.shape != (truth.shape[1],):
        raise DataError(f"train_label_freq has shape {freq.shape}, expected ({truth.shape[1]},)")
    top = check_ranked(ranked, truth)[:, :k]
    hits = hit_matrix(top, truth)
    width = truth.shape[1]
    tp = np.bincount(top[hits], minlength=width)
    predicted = np.bincount(top[top >= 0], minlength=width)
    relevant = np.bincount(truth.indices, minlength=width)
    denominator = predicted + relevant  # = 2TP + FP + FN
    counted = denominator > 0
    f1 = np.divide(2.0 * tp, denominator, out=np.zeros(width), where=counted)
    segment = segment_of(freq)
    out = {name: _mean_or_nan(f1[counted & (segment == name)]) for name in (*SEGMENTS, UNSEEN)}
    out["all"] = _mean_or_nan(f1[counted])
    return out


def _mean_or_nan(values: np.ndarray) -> float:
    return float(values.mean()) if values.size else float("nan")
