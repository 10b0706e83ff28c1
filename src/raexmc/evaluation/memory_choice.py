"""Choosing the memory on held-out training inputs: its share of training-input keys (`memory.keep: auto`) and the
label prototypes' α (`memory.prototypes: auto` below keep 1). Each point is judged at its own best λ (selection.select),
a keep below the grid's largest at the largest's retrieval, share and τ (under 2x keep 1's tune CPU on FOLDOC). The
best `infer.auto_metric` wins, ties to the larger keep or the smaller α; a choice on an edge widens its grid as τ's
widens. The input keys are searched once per keep, the labels once per α (MemoryTuning)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ..memory.input_memory import MemorySettings
from ..memory.prototypes import searches_prototypes
from ..memory.search import Hits, empty_result
from ..settings import AUTO
from .selection import choose, past_edge, select
from .selection_file import Selection
from .tune_settings import TuneSettings
from .validation_memory import (
    HeldOutLabels,
    ValidationRetrieval,
    label_search,
    pooled,
    pooled_held,
    pooled_hits,
    validation_retrieval,
)

Tuned = tuple[ValidationRetrieval, Selection]   # a memory's validation retrieval and select's choice on it


def chosen_row(selection: Selection) -> dict[str, Any]:
    """One point of a curve: the memory's input keys, its α where chosen, and the validation row `select` chose."""
    row = choose(selection.validation, selection.metric, selection.lam, selection.tau,
                 selection.label_share)  # all three fixed: the one row there
    prototypes = {} if selection.prototypes is None else {"prototypes": selection.prototypes}
    return {"input_keys": selection.memory_input_keys, **prototypes, **row}


def choose_point(axis: str, grid: tuple[float, ...], tune_at: Callable[[float], Tuned], metric: str,
                 ties_to_larger: bool, most: float | None = None
                 ) -> tuple[float, ValidationRetrieval, Selection, list[dict[str, Any]]]:
    """The chosen point, its retrieval and selection, and the curve (a chosen_row per point, ascending); a point
    on an edge widens the grid as τ widens, to at most `most`."""
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
        wider = past_edge("tau", sorted(rows), chosen[0], original)
        pending = [point for point in sorted({p if most is None else min(most, p) for p in wider}) if point not in rows]
    point, retrieval, selection = chosen
    return point, retrieval, selection, [rows[p] for p in sorted(rows)]


def choose_keep(tuning: MemoryTuning, grid: tuple[float, ...]) -> tuple[ValidationRetrieval, Selection]:
    """The chosen keep's retrieval and selection, with the keep and its curve (largest first); a keep below the
    grid's largest is judged narrowly (the module's docstring), a smaller winner then tuned in full."""
    top, settings = max(grid), tuning.settings
    largest = (_, chosen) = tuning.at(top)  # a joint retrieval leaves the share as it is
    narrow = dataclasses.replace(settings, retrieval=chosen.retrieval, tau=chosen.tau, tau_grid=(chosen.tau,),
                                 label_share=settings.label_share if chosen.label_share is None else chosen.label_share)
    def tune_at(point: float) -> Tuned:
        return largest if point == top else tuning.at(point, narrow)

    keep, retrieval, selection, curve = choose_point("keep", grid, tune_at, settings.metric, True, 1.0)
    if keep != top:
        retrieval, selection = tuning.at(keep, retrieval=retrieval)
        curve = [{"keep": keep, **chosen_row(selection)} if row["keep"] == keep else row for row in curve]
    return retrieval, selection.with_(keep=keep, auto={**selection.auto, "keep": True}, keep_curve=curve[::-1])


def choose_prototypes(inputs: ValidationRetrieval, labels_at: Callable[[float], Hits], settings: TuneSettings,
                      grid: tuple[float, ...], propensity_ab: tuple[float, float]) -> Tuned:
    """The chosen α's retrieval (`inputs`' with the labels' hits at α) and selection, with α and its curve."""
    def tune_at(weight: float) -> Tuned:
        retrieval = dataclasses.replace(inputs, labels=labels_at(weight))
        return retrieval, select(retrieval, settings, propensity_ab)

    weight, retrieval, selection, curve = choose_point("prototypes", grid, tune_at, settings.metric,
                                                       ties_to_larger=False)
    return retrieval, selection.with_(prototypes=weight, auto={**selection.auto, "prototypes": True},
                                      prototypes_curve=curve)


@dataclass
class MemoryTuning:
    """The tune stage's measure of the memory at a keep: λ, τ (and the share) chosen by select, α by
    choose_prototypes where `prototypes_grid` is searched; several `folds` are each searched, then pooled."""

    embeddings: str | os.PathLike
    folds: list[HeldOutLabels]
    settings: TuneSettings
    propensity_ab: tuple[float, float]
    memory_at: Callable[[float, float | None], MemorySettings]   # the memory settings at a keep and α
    backend: str
    prototypes_grid: tuple[float, ...] | None = None
    device: str = "cpu"
    _labels: dict[float, list[Hits]] = field(default_factory=dict, repr=False)

    @cached_property
    def held(self) -> HeldOutLabels:
        return pooled_held(self.folds)

    def searches_prototypes(self, keep: float) -> bool:
        return self.prototypes_grid is not None and searches_prototypes(AUTO, keep, self.backend)

    def labels_at(self, weight: float) -> list[Hits]:
        """Each fold's top-b over the labels' prototypes at α `weight`, searched once per α."""
        if weight not in self._labels:
            self._labels[weight] = [label_search(self.embeddings, fold, self.settings.b, self.device, weight)
                                    for fold in self.folds]
        return self._labels[weight]

    def retrieval(self, memory: MemorySettings, weight: float) -> ValidationRetrieval:
        return pooled([validation_retrieval(self.embeddings, fold, self.settings.b, self.device, memory, labels=labels)
                       for fold, labels in zip(self.folds, self.labels_at(weight))], self.held)

    def full_memory(self, depth: int) -> ValidationRetrieval:
        """kNN's validation retrieval (selection.select_knn): top-`depth` over every input, no label search."""
        return pooled([validation_retrieval(self.embeddings, fold, depth, self.device,
                                            labels=empty_result(len(fold.val_rows), 0))
                       for fold in self.folds], self.held)

    def at(self, keep: float, settings: TuneSettings | None = None,
           retrieval: ValidationRetrieval | None = None) -> Tuned:
        """The validation retrieval at `keep` and its selection by `settings` (default the stage's); `retrieval`, one
        at this keep already made, spares its k-means and search."""
        settings, searched = settings or self.settings, self.searches_prototypes(keep)
        memory = self.memory_at(keep, min(self.prototypes_grid) if searched else None)  # the inputs' side at any α
        retrieval = retrieval or self.retrieval(memory, memory.prototypes)
        if not searched:
            return retrieval, select(retrieval, settings, self.propensity_ab)
        return choose_prototypes(retrieval, lambda alpha: pooled_hits(self.labels_at(alpha)), settings,
                                 self.prototypes_grid, self.propensity_ab)
