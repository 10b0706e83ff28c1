"""Fitting the per-query λ model (rae/query_lambda.py) on the tune stage's validation retrieval: its targets are
each query's metric at each grid λ, ranked and measured as the evaluate stage measures the test set."""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from ..memory.search import Hits
from ..rae.model import RaeModel, RaeSettings
from ..rae.query_lambda import DEFAULT_FOLDS, DEFAULT_RIDGE, QueryLambda, fit_query_lambda, query_features
from .evaluator import Evaluator, query_chunks, rank_chunks, stacked_rankings
from .methods import rae_scorer
from .selection_file import Selection
from .tune_settings import TuneSettings
from .validation_memory import ValidationRetrieval

DEFAULT_METRIC = "P@1"


def metric_by_lambda(joint: Hits, evaluator: Evaluator, grid: np.ndarray, tau: float, b: int,
                     metric: str = DEFAULT_METRIC) -> np.ndarray:
    """(n, G): each query's `metric` (a fraction) under RAE at each λ of `grid` on the joint retrieval, every λ
    ranked in one sweep (evaluator.rank_chunks)."""
    scorers = [rae_scorer(RaeModel(evaluator.rae_values, RaeSettings(lam, tau, b)), joint) for lam in grid]
    ranked: list[list[np.ndarray]] = [[] for _ in scorers]
    rank_chunks(evaluator, None, lambda rows, _pool: [(i, partial(scorer, rows)) for i, scorer in enumerate(scorers)],
                lambda _rows, i, rows_ranked, _scores: ranked[i].append(rows_ranked))
    values = [evaluator.per_query_values(stacked_rankings(chunks)) for chunks in ranked]
    if metric not in values[0]:
        raise ValueError(f"unknown metric {metric!r}; known: {', '.join(values[0])}")
    return np.column_stack([value[metric] for value in values])


def fit_on_selection(retrieval: ValidationRetrieval, settings: TuneSettings, selection: Selection,
                     propensity_ab: tuple[float, float]) -> tuple[QueryLambda, dict[str, Any]]:
    """The per-query λ model of the tune stage's validation retrieval at the chosen point, over its λ grid; with too
    few held-out queries to cross-validate, the chosen λ for every query (`uses_model` false, `reason`)."""
    grid = np.array(settings.lambdas())
    tau, metric = selection.tau, settings.metric
    if len(retrieval.held.val_rows) < 2 * DEFAULT_FOLDS:
        model = QueryLambda(grid, selection.lam, tau, settings.b)
        return model, {"metric": metric, "queries": len(retrieval.held.val_rows), "uses_model": False,
                       "reason": f"fewer than {2 * DEFAULT_FOLDS} validation queries: the chosen lambda"}
    return fit_on_validation(retrieval.hits(tau, selection.rae_retrieval), retrieval.evaluator(propensity_ab), grid,
                             tau, settings.b, metric, fixed_lambda=selection.lam)


def fit_on_validation(joint: Hits, evaluator: Evaluator, grid: np.ndarray, tau: float, b: int,
                      metric: str = DEFAULT_METRIC, folds: int = DEFAULT_FOLDS,
                      ridge: float = DEFAULT_RIDGE,
                      fixed_lambda: float | None = None) -> tuple[QueryLambda, dict[str, Any]]:
    """The per-query λ model and fit report of validation queries (their joint retrieval and evaluator);
    `fixed_lambda` is the λ it must beat and else falls back to (default: the best on these queries)."""
    # features a chunk of queries at a time: all 20,000 queries' score halves at once took 1.5 GB at 1.3M
    ids, sims = joint
    features = np.vstack([query_features(ids[rows], sims[rows], evaluator.rae_values, tau, b)
                          for rows in query_chunks(len(ids))])
    targets = metric_by_lambda(joint, evaluator, grid, tau, b, metric)
    model, report = fit_query_lambda(features, targets, grid, tau, b, folds, ridge, fixed_lambda=fixed_lambda)
    return model, {"metric": metric, **report}
