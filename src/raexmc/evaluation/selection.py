"""Choosing RAE's λ and τ (and a split retrieval's label share), and kNN's τ, on held-out training inputs
(`infer.lambda`, `infer.tau`, `infer.label_share: auto`), never on the test set.

The held-out inputs query a memory built like the evaluation's from the inputs that remain. One exact search of the
input keys and one of the labels serve the whole grid, each point ranked and scored by the Evaluator as the test set
is. The best `infer.auto_metric` wins; ties (metrics are rounded to 0.01 points) go to the joint retrieval, then the
paper's λ 0.5 and τ 0.04 (τ by ratio), then the share nearest 0.5. A chosen value on its grid's edge widens the grid
past it (at most WIDEN_STEPS points). A split retrieval's share is chosen in a second round at the chosen τ, so that
the grids' costs add up rather than multiply. kNN (RAE at λ 1 on an input-only memory, at its own b) gets its own τ
the same way, so that RAE's lead is measured against a kNN at its own best."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import numpy as np

from ..memory.merge import DEFAULT_LABEL_SHARE, JOINT, SPLIT, RaeRetrieval
from ..memory.search import Hits, empty_result
from ..parallel import worker_count
from ..rae.ranking import top_k_parts
from ..rae.scoring import PAPER_LAMBDA, PAPER_TAU
from .evaluator import CHUNK_BYTES, RANK_DEPTH, Ranking, chunk_queries, rank_chunks, stacked_rankings
from .methods import HEADLINE, KNN_B
from .selection_file import KnnChoice, Selection
from .tune_settings import TuneSettings
from .validation_memory import ValidationRetrieval

WIDEN_STEPS = 3  # points a chosen value's grid may gain past each of its edges
KNN_LAMBDA = 1.0   # kNN is RAE at λ = 1 on an input-only memory


class ValidationCurve:
    """The headline metrics (percent) of RAE at points (λ, τ, label share) on the held-out inputs, each measured
    once: rows {"lambda", "tau", "label_share" (None: joint), metric...}, a chunk of queries at a time."""

    def __init__(self, retrieval: ValidationRetrieval, propensity_ab: tuple[float, float]):
        self.retrieval = retrieval
        self.evaluator = retrieval.evaluator(propensity_ab)
        self.rows: dict[tuple, dict[str, Any]] = {}

    def measure(self, lambdas: list[float], taus: list[float], shares: list[float | None]) -> None:
        """Add the points of lambdas x taus x shares (None: joint) not measured yet."""
        for share in shares:
            rae = RaeRetrieval(JOINT if share is None else SPLIT, share)
            points = [(tau, lam) for tau in taus for lam in lambdas if (lam, tau, rae.label_share) not in self.rows]
            if points:
                self._measure(points, rae)

    def _measure(self, points: list[tuple[float, float]], rae: RaeRetrieval) -> None:
        """Each τ's keys and halves once a chunk, then each (τ, λ) point mixed."""
        evaluator, inputs, labels = self.evaluator, self.retrieval.inputs, self.retrieval.labels
        models = {tau: self.retrieval.model(tau, rae) for tau, _ in points}
        ranked: dict[tuple[float, float], list[np.ndarray]] = {point: [] for point in points}
        lambdas_at = Counter(tau for tau, _ in points)
        workers = min(len(points), worker_count())

        def keys(tau: float, chunk: slice) -> Hits:
            return models[tau].keys(*((hits[0][chunk], hits[1][chunk]) for hits in (inputs, labels)))

        def halves(chunk: slice, tau: float) -> Any:  # where several λ share them, cut to what their tops can hold
            parts = models[tau].parts(*keys(tau, chunk))
            return top_k_parts(parts, RANK_DEPTH, evaluator.exclude[chunk]) if lambdas_at[tau] > 1 else parts

        def mixed(point: tuple[float, float], at_tau: dict) -> Any:
            tau, lam = point
            return models[tau].at(lam=lam).mix(at_tau[tau])

        def rankings_of(chunk: slice, pool: ThreadPoolExecutor) -> list[Ranking]:
            at_tau = dict(zip(models, pool.map(partial(halves, chunk), models)))
            return [(point, partial(mixed, point, at_tau)) for point in points]

        width = keys(points[0][0], slice(0, 1))[0].shape[1]  # keys a query, the same at every τ
        # the threads share one chunk's budget, beside the score halves of every τ
        size = chunk_queries(evaluator.rae_values, width, CHUNK_BYTES // (workers + len(models)))
        rank_chunks(evaluator, size, rankings_of, lambda _rows, point, rows, _scores: ranked[point].append(rows),
                    workers)
        for tau, lam in points:
            summary = evaluator.summary(stacked_rankings(ranked.pop((tau, lam))))[0]
            self.rows[lam, tau, rae.label_share] = {"lambda": lam, "tau": tau, "label_share": rae.label_share,
                                                    **{k: summary[k] for k in HEADLINE}}

    def curve(self) -> list[dict[str, Any]]:
        return list(self.rows.values())


def past_edge(axis: str, grid: list[float], value: float, original: list[float]) -> list[float]:
    """The points past the edge of `grid` that `value` sits on: τ doubled or halved; λ and the share one edge gap
    further (0.1 for one point), within [0, 1]; none past WIDEN_STEPS."""
    grid = sorted(grid)
    points = []
    for edge, inner, sign, beyond in ((grid[-1], grid[-2:-1], 1, sum(v > max(original) for v in grid)),
                                      (grid[0], grid[1:2], -1, sum(v < min(original) for v in grid))):
        if value != edge or beyond >= WIDEN_STEPS:
            continue
        if axis == "tau":
            points.append(edge * 2.0 ** sign)
        elif (edge < 1.0) if sign > 0 else (edge > 0.0):  # λ and the share stop at 0 and 1
            gap = abs(edge - inner[0]) if inner else 0.1
            points.append(min(1.0, max(0.0, edge + sign * gap)))
    return [float(f"{point:.10g}") for point in points if point not in grid]


def widen_and_choose(curve: ValidationCurve, grids: dict[str, list], auto: tuple[str, ...], metric: str,
                     fixed: dict[str, float | None]) -> dict[str, Any]:
    """The best row of the grids (an axis not in `auto` at its `fixed` value), widened past an edge an `auto`
    axis's choice sits on until none does; `grids` ends holding every point."""
    original = {axis: list(values) for axis, values in grids.items()}
    while True:
        curve.measure(grids["lambda"], grids["tau"], grids["label_share"])
        best = choose(curve.curve(), metric, **fixed)
        grew = False
        for axis in auto:
            new = past_edge(axis, grids[axis], best[axis], original[axis])
            grids[axis] = sorted([*grids[axis], *new])
            grew = grew or bool(new)
        if not grew:
            return best


def choose(curve: list[dict[str, Any]], metric: str, lam: float | None = None, tau: float | None = None,
           label_share: float | None = None) -> dict[str, Any]:
    """The curve's best row by `metric` at the fixed λ / τ / label share (None: free), ties as the module says."""
    fixed = {"lambda": lam, "tau": tau, "label_share": label_share}
    rows = [r for r in curve if all(value is None or r.get(axis) == value for axis, value in fixed.items())]
    if not rows:
        raise ValueError(f"no validation row at lambda={lam}, tau={tau}, label_share={label_share}")

    def share_distance(row: dict[str, Any]) -> float:
        share = row.get("label_share")
        return 0.0 if share is None else abs(share - DEFAULT_LABEL_SHARE)

    return min(rows, key=lambda r: (-r[metric], r.get("label_share") is not None, abs(r["lambda"] - PAPER_LAMBDA),
                                    abs(math.log(r["tau"] / PAPER_TAU)), share_distance(r), r["lambda"], r["tau"],
                                    r.get("label_share") or 0.0))


def select(retrieval: ValidationRetrieval, settings: TuneSettings,
           propensity_ab: tuple[float, float]) -> Selection:
    """The chosen λ, τ and retrieval, the metric there and at the fixed values, and the curve: per retrieval λ x τ
    (split at its fixed share, 0.5 when auto), then for an auto share λ x share at split's chosen τ."""
    curve, metric = ValidationCurve(retrieval, propensity_ab), settings.metric
    auto = tuple(axis for axis, value in (("lambda", settings.lam), ("tau", settings.tau)) if value is None)
    for mode in settings.retrievals:
        share = None if mode == JOINT else settings.split_share
        grids = {"lambda": settings.lambdas(), "tau": settings.taus(), "label_share": [share]}
        best = widen_and_choose(curve, grids, auto, metric, {"lam": settings.lam, "tau": settings.tau,
                                                             "label_share": share})
        if mode == SPLIT and settings.chooses_share:
            grids = {**grids, "tau": [best["tau"]], "label_share": settings.shares()}
            widen_and_choose(curve, grids, (*(axis for axis in auto if axis == "lambda"), "label_share"), metric,
                             {"lam": settings.lam, "tau": best["tau"], "label_share": None})
    rows = curve.curve()
    best = choose(rows, metric, settings.lam, settings.tau, None if settings.chooses_share else settings.fixed_share)
    fixed = choose([row for row in rows if row["label_share"] == settings.fixed_share], metric,
                   settings.fixed_lambda, settings.fixed_tau)
    return Selection(lam=best["lambda"], tau=best["tau"], retrieval=JOINT if best["label_share"] is None else SPLIT,
                     label_share=best["label_share"], metric=metric,
                     auto={"lambda": settings.lam is None, "tau": settings.tau is None,
                           "retrieval": settings.retrieval is None, "label_share": settings.chooses_share},
                     val_value=best[metric], fixed_lambda=settings.fixed_lambda, fixed_tau=settings.fixed_tau,
                     fixed_label_share=settings.fixed_share, fixed_val_value=fixed[metric],
                     val_queries=len(retrieval.held.val_rows), val_folds=retrieval.held.folds,
                     memory_inputs=len(retrieval.held.rest_rows), memory_input_keys=retrieval.keys_per_fold,
                     val_fraction=settings.val_fraction, val_max_queries=settings.val_max_queries,
                     val_seed=settings.val_seed, val_split_from=settings.fraction_key.split(".")[0], b=settings.b,
                     validation=rows)


def select_knn(full_memory: Callable[[int], ValidationRetrieval], settings: TuneSettings,
               propensity_ab: tuple[float, float]) -> KnnChoice:
    """kNN's τ: with τ auto, the best of kNN's own curve on `full_memory(KNN_B)` (no label key, no prior); else the
    fixed τ (a user's τ is every method's). The dual encoder has none: its ranking is the same at any τ."""
    if settings.tau is not None:
        return KnnChoice(tau=settings.tau, auto={"tau": False})
    retrieval = full_memory(KNN_B)
    if retrieval.b < KNN_B:
        raise ValueError(f"kNN's validation search must be {KNN_B} deep, got {retrieval.b}")
    retrieval = dataclasses.replace(retrieval, labels=empty_result(len(retrieval.held.val_rows), 0), log_counts=None,
                                    b=KNN_B)
    curve, metric = ValidationCurve(retrieval, propensity_ab), settings.metric
    grids = {"lambda": [KNN_LAMBDA], "tau": settings.taus(), "label_share": [None]}
    best = widen_and_choose(curve, grids, ("tau",), metric, {"lam": KNN_LAMBDA, "tau": None, "label_share": None})
    fixed = choose(curve.curve(), metric, KNN_LAMBDA, settings.fixed_tau)
    return KnnChoice(tau=best["tau"], auto={"tau": True}, val_value=best[metric], fixed_tau=settings.fixed_tau,
                     fixed_val_value=fixed[metric],
                     validation=[{"tau": row["tau"], **{k: row[k] for k in HEADLINE}} for row in curve.curve()])
