"""Evaluate RAE-XMC and its baselines from one set of searches: the configured method, the dual
encoder, kNN, and RAE's λ and b sweeps.

Each method scores its own search: RAE the top-b_max over the joint keys, the dual encoder the top-b
over the label keys alone, kNN the top-b over the training-input keys alone. One joint retrieval
serves every λ and every b <= b_max, because the scores of a smaller b use a prefix of the same
ranked keys. The three come from two searches (memory.merge.JointSearch.search_all): the joint one
is the merge of the inputs' and the labels' top-b_max.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..data.stats import label_frequency
from ..memory.search import Hits
from ..rae.pairs import remove_pairs
from ..rae.ranking import top_k
from ..rae.scoring import combine, dual_encoder_scores, knn_scores, ova_knn_scores, score_parts, train_key_share
from .macro_f1 import macro_f1_by_segment
from .metrics import per_instance_metrics, summarize
from .propensity import DEFAULT_AB, propensities

RANK_DEPTH = 100  # deep enough for R@100
F1_K = 5
QUERY_CHUNK = 8192  # queries scored at once: bounds the sparse score matrices' memory

Scorer = Callable[[slice], sp.csr_matrix]  # label scores of a chunk of queries


@dataclass
class Retrievals:
    """Every query's top keys from the three searches: joint keys (RAE), label keys alone (dual
    encoder) and training-input keys alone (kNN); each holds ids within its own key set."""

    joint: Hits
    labels: Hits
    inputs: Hits


@dataclass
class EvalSettings:
    lam: float
    b: int
    tau: float
    lambda_sweep: list[float] = field(default_factory=list)
    b_sweep: list[int] = field(default_factory=list)
    propensity_ab: tuple[float, float] = DEFAULT_AB


@dataclass
class Evaluator:
    """Rankings and metrics for one dataset split (test inputs against the training memory).

    `Y_train` is the values' input part (see memory.keys_values.training_values); its pattern also gives the
    label frequencies behind propensities and segments. `memory_values` are the values of RAE's input
    keys when its memory keeps other keys than the training inputs (memory.input_memory); kNN and the
    label frequencies keep `Y_train`.
    """

    Y_train: sp.csr_matrix
    Y_test: sp.csr_matrix
    exclude: sp.csr_matrix
    propensity_ab: tuple[float, float]
    memory_values: sp.csr_matrix | None = None

    @property
    def rae_values(self) -> sp.csr_matrix:
        """The values RAE's input keys carry."""
        return self.Y_train if self.memory_values is None else self.memory_values

    def __post_init__(self) -> None:
        self.truth = remove_pairs(self.Y_test, self.exclude)
        self.train_freq = label_frequency(self.Y_train)
        A, B = self.propensity_ab
        self.propensity = propensities(self.train_freq, self.Y_train.shape[0], A, B)

    def rank(self, num_queries: int, scores_of: Scorer) -> np.ndarray:
        """Top-100 labels from `scores_of(rows)`, called on chunks of queries to bound memory;
        filtered pairs are never ranked."""
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


def rae_scorer(joint: Hits, Y_train: sp.csr_matrix, lam: float, tau: float, b: int) -> Scorer:
    """RAE(λ, τ, b) on the joint retrieval."""
    ids, sims = joint
    return lambda rows: combine(score_parts(ids[rows], sims[rows], Y_train, tau, b), lam)


def method_scorers(retrievals: Retrievals, Y_train: sp.csr_matrix, lam: float, tau: float,
                   b: int, rae_values: sp.csr_matrix | None = None) -> dict[str, Scorer]:
    """RAE at λ (its input keys carrying `rae_values`, by default Y_train), and the dual encoder and kNN,
    each from its own search, all at (τ, b)."""
    (z_ids, z_sims), (x_ids, x_sims) = retrievals.labels, retrievals.inputs
    return {"rae": rae_scorer(retrievals.joint, Y_train if rae_values is None else rae_values, lam, tau, b),
            "dual_encoder": lambda rows: dual_encoder_scores(z_ids[rows], z_sims[rows], Y_train.shape[1], tau, b),
            "knn": lambda rows: knn_scores(x_ids[rows], x_sims[rows], Y_train, tau, b)}


def ova_knn_scorer(retrievals: Retrievals, Y_train: sp.csr_matrix, lam: float, tau: float, b: int) -> Scorer:
    """The paper's Eq. 12 ablation from the baselines' two searches, mixed by λ."""
    (z_ids, z_sims), (x_ids, x_sims) = retrievals.labels, retrievals.inputs
    return lambda rows: ova_knn_scores(x_ids[rows], x_sims[rows], z_ids[rows], z_sims[rows], Y_train, lam, tau, b)


def evaluate_retrieval(retrievals: Retrievals, evaluator: Evaluator, settings: EvalSettings,
                       with_ova_knn: bool = False) -> dict[str, Any]:
    """Metrics of RAE (λ, b), the dual encoder and kNN (optionally OvA+kNN), and RAE's λ and b sweeps.

    Returns {"methods": {name: summary}, "per_instance": {name: arrays}, "lambda_sweep": rows,
    "b_sweep": rows}.
    """
    num_queries, Y, V = len(retrievals.joint[0]), evaluator.Y_train, evaluator.rae_values
    scorers = method_scorers(retrievals, Y, settings.lam, settings.tau, settings.b, V)
    if with_ova_knn:
        scorers["ova_knn"] = ova_knn_scorer(retrievals, Y, settings.lam, settings.tau, settings.b)
    methods, per_instance = {}, {}
    for name, scorer in scorers.items():
        methods[name], per_instance[name] = evaluator.summary(evaluator.rank(num_queries, scorer))

    def headline(lam: float, b: int) -> dict[str, float]:
        summary = evaluator.summary(evaluator.rank(num_queries, rae_scorer(retrievals.joint, V, lam, settings.tau, b)))[0]
        return {k: summary[k] for k in HEADLINE if k in summary}

    lambda_rows = [{"lambda": lam, **headline(lam, settings.b)} for lam in settings.lambda_sweep]
    b_rows = [{"b": b, **headline(settings.lam, b),
               "train_key_share": round(100 * train_key_share(retrievals.joint[0], V.shape[0], b), 2)}
              for b in settings.b_sweep]
    return {"methods": methods, "per_instance": per_instance, "lambda_sweep": lambda_rows, "b_sweep": b_rows}


HEADLINE = ("P@1", "P@3", "P@5", "nDCG@5", "PSP@5", "R@10", "R@100")


def segment_rows(methods: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Macro-F1@5 per segment as plot rows: {"method", "segment", "F1"}."""
    return [{"method": method, "segment": segment, "F1": value}
            for method, summary in methods.items()
            for segment, value in summary[f"macro-F1@{F1_K}"].items() if segment != "all"]
