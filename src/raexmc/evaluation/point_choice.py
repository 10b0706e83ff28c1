"""Choosing one number of the memory on held-out training inputs (the keep, keep_selection.py; the label prototypes'
α, prototype_selection.py): each point of its grid is judged at its own best λ and τ (and label share), chosen
afresh on that memory by selection.select, never at another point's. The best `infer.auto_metric` wins, ties
(metrics are rounded to 0.01 points) to the point the axis prefers; a choice cannot fall off the grid: while it
sits on an edge, points past that edge are tried too, at most selection.WIDEN_STEPS of them, as λ and τ widen.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .selection import choose
from .selection_file import Selection
from .validation_memory import ValidationRetrieval

Tuned = tuple[ValidationRetrieval, Selection]   # a memory's validation retrieval and select's choice on it


def chosen_row(selection: Selection) -> dict[str, Any]:
    """One point of a curve: the memory's input keys, its α where chosen on it, and the validation row (λ, τ,
    label share, headline metrics) at the point `select` chose."""
    row = choose(selection.validation, selection.metric, selection.lam, selection.tau,
                 selection.label_share)  # all three fixed: the one row there
    prototypes = {} if selection.prototypes is None else {"prototypes": selection.prototypes}
    return {"input_keys": selection.memory_input_keys, **prototypes, **row}


def choose_point(axis: str, grid: tuple[float, ...], tune_at: Callable[[float], Tuned], metric: str,
                 ties_to_larger: bool, widen: Callable[[list[float], float, list[float]], list[float]]
                 ) -> tuple[float, ValidationRetrieval, Selection, list[dict[str, Any]]]:
    """The chosen point, its retrieval and selection, and the curve: {axis: point, **chosen_row} per point tried,
    in ascending order. `widen(tried, chosen, original grid)` gives the points past the edge the choice sits on
    (selection.past_edge's)."""
    original, rows = sorted(set(grid)), {}
    chosen: tuple[float, ValidationRetrieval, Selection] | None = None

    def rank(point: float) -> tuple[float, float]:
        return rows[point][metric], point if ties_to_larger else -point

    pending = original
    while pending:
        for point in sorted(pending, reverse=ties_to_larger):
            retrieval, selection = tune_at(point)
            rows[point] = {axis: point, **chosen_row(selection)}
            if chosen is None or rank(point) > rank(chosen[0]):
                chosen = point, retrieval, selection
            del retrieval  # only the chosen one's is kept
        pending = [point for point in widen(sorted(rows), chosen[0], original) if point not in rows]
    point, retrieval, selection = chosen
    return point, retrieval, selection, [rows[p] for p in sorted(rows)]


def curve_metrics(curve: list[dict[str, Any]], axis: str) -> dict[str, dict[str, Any]]:
    """A curve as MLflow metrics, one group per point ("keep_curve.0.25.P@1" and so on)."""
    return {f"{row[axis]:g}": {k: v for k, v in row.items() if k != axis} for row in curve}
