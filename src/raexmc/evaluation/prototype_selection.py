"""Choosing the label prototypes' α on held-out training inputs (`memory.prototypes: auto` below keep 1), never on
the test set.

How far a label's key should move from its text towards its inputs' mean (prototypes.py) moves with the data, the
encoder and the keep, so the tune stage measures each α of `memory.prototypes_grid` as it measures a keep: the
held-out inputs search the labels' prototypes made at that α from the remaining inputs (as the memory stage makes
them from all), and λ and τ (and a split retrieval's automatic label share) are chosen afresh on that memory
(selection.select), so that each α is judged at its own best λ and τ. The α with the best `infer.auto_metric`
wins; among equal values (metrics are rounded to 0.01 points) the smaller α, the nearer the label texts. Where the
largest α tried wins, its double is tried too (where the smallest above 0 wins, its half), at most WIDEN_STEPS
points past each edge (point_choice.choose_point).

Only the labels' side depends on α: the memory's input keys, their selection and their search are made once per
keep, and the labels' search once per α, whatever the keep (MemoryTuning). Each α then costs one exact search of
the held-out inputs over the labels and one λ × τ curve.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from ..memory.input_memory import MemorySettings
from ..memory.prototypes import searches_prototypes
from ..memory.search import Hits, empty_result
from ..settings import AUTO
from .point_choice import Tuned, choose_point
from .selection import past_edge, select
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


def choose_prototypes(retrieval_at: Callable[[float], ValidationRetrieval], settings: TuneSettings,
                      grid: tuple[float, ...], propensity_ab: tuple[float, float]) -> Tuned:
    """The validation retrieval of the chosen α and its selection (select's), with `prototypes` (α),
    `auto.prototypes` and the α curve (point_choice.chosen_row per α tried, smallest first) added.
    `retrieval_at` gives the memory's validation retrieval with the labels' prototypes at an α."""
    def tune_at(weight: float) -> Tuned:
        retrieval = retrieval_at(weight)
        return retrieval, select(retrieval, settings, propensity_ab)

    def widen(tried: list[float], chosen: float, original: list[float]) -> list[float]:
        return past_edge("tau", tried, chosen, original)  # α, like τ, is a scale: doubled (or halved, above 0)

    weight, retrieval, selection, curve = choose_point("prototypes", grid, tune_at, settings.metric,
                                                       ties_to_larger=False, widen=widen)
    return retrieval, selection.with_(prototypes=weight, auto={**selection.auto, "prototypes": True},
                                      prototypes_curve=curve)


@dataclass
class MemoryTuning:
    """The tune stage's measure of the memory at a keep on the held-out inputs: λ and τ (and the label share)
    chosen on it by select, and α by choose_prototypes where memory.prototypes auto is searched there
    (`prototypes_grid` is the grid where memory.prototypes is auto, else None). With several validation `folds`,
    each fold's memory is built and searched, and the folds are pooled into one retrieval (validation_memory.pooled)."""

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
        """Every fold's queries as one set."""
        return pooled_held(self.folds)

    def searches_prototypes(self, keep: float) -> bool:
        return self.prototypes_grid is not None and searches_prototypes(AUTO, keep, self.backend)

    def labels_at(self, weight: float) -> list[Hits]:
        """Each fold's held-out inputs' top-b over the labels' prototypes at α `weight` (made from that fold's
        memory inputs): searched once, whatever the keep."""
        if weight not in self._labels:
            self._labels[weight] = [label_search(self.embeddings, fold, self.settings.b, self.device, weight)
                                    for fold in self.folds]
        return self._labels[weight]

    def retrieval(self, memory: MemorySettings, weight: float) -> ValidationRetrieval:
        """Every fold's validation retrieval of `memory`, with the labels' prototypes at α `weight`, pooled."""
        return pooled([validation_retrieval(self.embeddings, fold, self.settings.b, self.device, memory, labels=labels)
                       for fold, labels in zip(self.folds, self.labels_at(weight))], self.held)

    def full_memory(self, depth: int) -> ValidationRetrieval:
        """Every fold's held-out inputs' top-`depth` over all of its memory's inputs, with no label search, pooled:
        kNN's validation retrieval (baseline_selection.py), whatever memory.keep keeps for RAE."""
        return pooled([validation_retrieval(self.embeddings, fold, depth, self.device,
                                            labels=empty_result(len(fold.val_rows), 0))
                       for fold in self.folds], self.held)

    def at(self, keep: float) -> Tuned:
        """The validation retrieval at `keep` (at the chosen α where α is searched) and its selection."""
        if not self.searches_prototypes(keep):
            memory = self.memory_at(keep, None)
            retrieval = self.retrieval(memory, memory.prototypes)
            return retrieval, select(retrieval, self.settings, self.propensity_ab)
        first = min(self.prototypes_grid)  # the input side of the memory is the same at every α
        inputs = self.retrieval(self.memory_at(keep, first), first)
        return choose_prototypes(lambda weight: dataclasses.replace(inputs, labels=pooled_hits(self.labels_at(weight))),
                                 self.settings, self.prototypes_grid, self.propensity_ab)
