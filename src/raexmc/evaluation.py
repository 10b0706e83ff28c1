"""Evaluate RAE-XMC from one retrieval: the configured method, its special cases and sweeps.

One top-b_max retrieval per test input serves every λ and every b <= b_max, because the scores
of a smaller b use a prefix of the same ranked keys.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from .data.stats import label_frequency
from .metrics import macro_f1_by_segment, per_instance_metrics, propensities, remove_pairs, summarize, top_k
from .index import ExactIndex
from .predict import combine, ova_knn_scores, score_parts, train_key_share

RANK_DEPTH = 100  # deep enough for R@100
F1_K = 5


@dataclass
class EvalSettings:
    lam: float
    b: int
    tau: float
    lambda_sweep: list[float] = field(default_factory=list)
    b_sweep: list[int] = field(default_factory=list)
    propensity_ab: tuple[float, float] = (0.55, 1.5)


QUERY_CHUNK = 8192  # queries scored at once: bounds the sparse score matrices' memory


@dataclass
class Evaluator:
    """Scores and metrics for one dataset split (test inputs against the training memory)."""

    Y_train: sp.csr_matrix
    Y_test: sp.csr_matrix
    exclude: sp.csr_matrix
    propensity_ab: tuple[float, float]

    def __post_init__(self) -> None:
        self.truth = remove_pairs(self.Y_test, self.exclude)
        self.train_freq = label_frequency(self.Y_train)
        A, B = self.propensity_ab
        self.propensity = propensities(self.train_freq, self.Y_train.shape[0], A, B)

    def rank(self, ids: np.ndarray, sims: np.ndarray, lam: float, tau: float, b: int) -> np.ndarray:
        """Top-100 labels of every query under RAE(λ, τ, b), filtered pairs never ranked."""
        return self.rank_by(len(ids), lambda rows: combine(score_parts(ids[rows], sims[rows], self.Y_train, tau, b), lam))

    def rank_by(self, num_queries: int, scores_of: Callable[[slice], sp.csr_matrix]) -> np.ndarray:
        """Top-100 labels from `scores_of(rows)`, called on chunks of queries to bound memory."""
        chunks = [top_k(scores_of(rows), RANK_DEPTH, exclude=self.exclude[rows])
                  for rows in (slice(start, start + QUERY_CHUNK) for start in range(0, num_queries, QUERY_CHUNK))]
        return np.vstack(chunks) if chunks else np.zeros((0, RANK_DEPTH), np.int64)

    def summary(self, ranked: np.ndarray) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Averaged metrics (percent) with macro-F1@5 per segment, and the per-instance arrays."""
        per = per_instance_metrics(ranked, self.truth, propensity=self.propensity)
        f1 = macro_f1_by_segment(ranked, self.truth, self.train_freq, k=F1_K)
        summary: dict[str, Any] = summarize(per)
        summary[f"macro-F1@{F1_K}"] = {k: (round(100 * v, 2) if np.isfinite(v) else None) for k, v in f1.items()}
        return summary, per


def evaluate_retrieval(ids: np.ndarray, sims: np.ndarray, evaluator: Evaluator, settings: EvalSettings) -> dict[str, Any]:
    """Metrics of RAE (λ, b), the dual encoder (λ=0), kNN (λ=1), and the λ and b sweeps.

    Returns {"methods": {name: summary}, "per_instance": {name: arrays}, "lambda_sweep": rows,
    "b_sweep": rows}.
    """
    methods, per_instance = {}, {}
    for name, lam in (("rae", settings.lam), ("dual_encoder", 0.0), ("knn", 1.0)):
        methods[name], per_instance[name] = evaluator.summary(evaluator.rank(ids, sims, lam, settings.tau, settings.b))
    lambda_rows = [{"lambda": lam, **_headline(evaluator.summary(evaluator.rank(ids, sims, lam, settings.tau, settings.b))[0])}
                   for lam in settings.lambda_sweep]
    num_train = evaluator.Y_train.shape[0]
    b_rows = [{"b": b, **_headline(evaluator.summary(evaluator.rank(ids, sims, settings.lam, settings.tau, b))[0]),
               "train_key_share": round(100 * train_key_share(ids, num_train, b), 2)}
              for b in settings.b_sweep]
    return {"methods": methods, "per_instance": per_instance, "lambda_sweep": lambda_rows, "b_sweep": b_rows}


HEADLINE = ("P@1", "P@3", "P@5", "nDCG@5", "PSP@5", "R@10", "R@100")


def _headline(summary: dict[str, Any]) -> dict[str, float]:
    return {k: summary[k] for k in HEADLINE if k in summary}


def segment_rows(methods: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Macro-F1@5 per segment as plot rows: {"method", "segment", "F1"}."""
    return [{"method": method, "segment": segment, "F1": value}
            for method, summary in methods.items()
            for segment, value in summary[f"macro-F1@{F1_K}"].items() if segment != "all"]


def evaluate_ova_knn(queries: np.ndarray, keys: np.ndarray, evaluator: Evaluator, settings: EvalSettings) -> dict[str, Any]:
    """The paper's Eq. 12 ablation: separate exact searches over inputs and over labels, mixed by λ."""
    num_train = evaluator.Y_train.shape[0]
    x_ids, x_sims = ExactIndex(np.ascontiguousarray(keys[:num_train])).search(queries, settings.b)
    z_ids, z_sims = ExactIndex(np.ascontiguousarray(keys[num_train:])).search(queries, settings.b)
    ranked = evaluator.rank_by(len(queries), lambda rows: ova_knn_scores(
        x_ids[rows], x_sims[rows], z_ids[rows], z_sims[rows], evaluator.Y_train, settings.lam, settings.tau))
    return evaluator.summary(ranked)[0]
