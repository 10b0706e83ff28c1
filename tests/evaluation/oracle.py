"""The XC Repository's metrics by brute force, one input and one label at a time (/work/shared/design.md): the one
oracle the metrics, score-file and evaluator tests check against."""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

# Label frequency in training -> segment: 0 unseen, 1-10 xtail, 11-100 tail, 101-1000 torso, more head.
SEGMENT_BOUNDS = (("xtail", 10), ("tail", 100), ("torso", 1000), ("head", math.inf))


def ranking(scores, i: int, banned=frozenset()) -> list[int]:
    """Row i's candidates (a sparse row's stored entries, a dense row's every label) without the (i, label) pairs
    in `banned`, by descending score, ties to the smaller label."""
    if sp.issparse(scores):
        lo, hi = scores.indptr[i], scores.indptr[i + 1]
        candidates = zip(scores.data[lo:hi], scores.indices[lo:hi])
    else:
        candidates = ((scores[i, label], label) for label in range(scores.shape[1]))
    kept = ((-float(s), int(label)) for s, label in candidates if (i, label) not in banned)
    return [label for _, label in sorted(kept)]


def inverse_propensity(freq, n_train: int, A: float, B: float) -> list[float]:
    C = (math.log(n_train) - 1) * (B + 1) ** A
    return [1 + C * math.exp(-A * math.log(f + B)) for f in freq]


def dcg(gains) -> float:
    return sum(g / math.log2(j + 2) for j, g in enumerate(gains))


def propensity_scored(rankings, positives, inv_p, k: int) -> dict[str, tuple[list, list]]:
    """pyxclib's psprecision and psndcg at k: {name: (per-input numerators, per-input ideals)}; the metric is
    mean(numerators) / mean(ideals). The ideal top k is the input's positives sorted by 1/p; nDCG's normaliser is
    IDCG over min(k, #positives) unit gains (0 and 0 for an input without positives)."""
    out = {"PSP": ([], []), "PSnDCG": ([], [])}
    for ranked, pos in zip(rankings, positives):
        gains = [inv_p[label] if label in pos else 0.0 for label in ranked[:k]]
        best = sorted((inv_p[label] for label in pos), reverse=True)[:k]
        idcg = dcg([1.0] * min(k, len(pos)))
        for kept, gain in ((0, gains), (1, best)):
            out["PSP"][kept].append(sum(gain) / k)
            out["PSnDCG"][kept].append(dcg(gain) / idcg if idcg else 0.0)
    return out


def per_input(rankings, positives, inv_p=None, ks=(1, 3, 5), recall_ks=(10, 100)) -> dict[str, np.ndarray]:
    """Each input's P@k, nDCG@k, R@k (fractions) and, given 1/p, PSP@k and PSnDCG@k over the mean ideal."""
    out = {}
    for ranked, pos in zip(rankings, positives):
        hit = [label in pos for label in ranked] + [False] * max((*ks, *recall_ks, 1))
        for k in ks:
            idcg = dcg([1.0] * min(k, len(pos)))
            out.setdefault(f"P@{k}", []).append(sum(hit[:k]) / k)
            out.setdefault(f"nDCG@{k}", []).append(dcg(hit[:k]) / idcg if idcg else 0.0)
        for k in recall_ks:
            out.setdefault(f"R@{k}", []).append(sum(hit[:k]) / max(len(pos), 1))
    for k in ks if inv_p is not None else ():
        for name, (numerators, ideals) in propensity_scored(rankings, positives, inv_p, k).items():
            out[f"{name}@{k}"] = [n / np.mean(ideals) for n in numerators]
    return {name: np.asarray(values) for name, values in out.items()}


def segment(freq: int) -> str:
    return "unseen" if freq == 0 else next(name for name, high in SEGMENT_BOUNDS if freq <= high)


def macro_f1(rankings, positives, freq, k: int) -> dict[str, float | None]:
    """Macro-F1 of the top k per segment and over all labels, of the labels ever predicted or relevant (None: none)."""
    tp, fp, fn = np.zeros(len(freq)), np.zeros(len(freq)), np.zeros(len(freq))
    for ranked, pos in zip(rankings, positives):
        top = set(ranked[:k])
        for label in range(len(freq)):
            tp[label] += label in top and label in pos
            fp[label] += label in top and label not in pos
            fn[label] += label not in top and label in pos
    f1 = {label: 2 * tp[label] / (2 * tp[label] + fp[label] + fn[label])
          for label in range(len(freq)) if tp[label] + fp[label] + fn[label]}
    chosen = {name: [v for label, v in f1.items() if name in ("all", segment(freq[label]))]
              for name in ("head", "torso", "tail", "xtail", "unseen", "all")}
    return {name: float(np.mean(values)) if values else None for name, values in chosen.items()}


def brute_force(train, test, filtered, scores, A: float, B: float) -> tuple[dict, dict]:
    """The score report's table (percent, macro-F1@5 per segment) and the per-input values of a score matrix on a
    test set: `train` and `test` are each input's labels, `filtered` the (input, label) pairs left out."""
    n_labels = scores.shape[1]
    freq = [sum(label in y for y in train) for label in range(n_labels)]
    rankings = [ranking(scores, i, filtered)[:100] for i in range(scores.shape[0])]
    positives = [{int(label) for label in y if (i, int(label)) not in filtered} for i, y in enumerate(test)]
    values = per_input(rankings, positives, inverse_propensity(freq, len(train), A, B))
    table = {name: round(100 * float(np.mean(v)), 2) for name, v in values.items()}
    table["macro-F1@5"] = {name: None if v is None else round(100 * v, 2)
                           for name, v in macro_f1(rankings, positives, freq, 5).items()}
    return table, values
