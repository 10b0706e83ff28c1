"""Choosing the memory's share of training-input keys on held-out training inputs (`memory.keep: auto`), never on
the test set.

A smaller memory can beat the full one (merged keys vote together; an input that misleads its neighbours may
be dropped), and where it does moves with the data and the encoder. So the tune stage measures each share of
`memory.keep_grid` as it measures λ and τ: for each keep, the memory is selected from the training inputs that
are not held out, as the memory stage selects it from all (selection.validation_retrieval), and λ and τ (and a
split retrieval's automatic label share) are chosen afresh on it (selection.select), so that each share is
judged at its own best λ and τ, not at another memory's. The keep with the best value of `infer.auto_metric`
wins; among equal values (metrics are rounded to 0.01 points) the larger keep, the nearer the paper's full
memory. A choice cannot fall off the grid: where the smallest keep tried wins, its half is tried too (where the
largest below 1 wins, its double, at most 1), at most WIDEN_STEPS points past each edge, as λ and τ widen.

The cost is one tune stage per keep tried: a key selection (k-means for the kmeans methods), one exact search
of the held-out inputs over the kept keys and over the labels, and one λ × τ curve, each smaller keep searching
fewer keys.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ..memory.input_memory import MemorySettings
from .selection import (HeldOutLabels, TuneSettings, ValidationRetrieval, choose, past_edge, select,
                        validation_retrieval)


def keep_row(keep: float, selection: dict[str, Any]) -> dict[str, Any]:
    """One point of the keep curve: the keep, its input keys, and the validation row (λ, τ, label share, headline
    metrics) at the point `select` chose on its memory."""
    chosen = choose(selection["validation"], selection["metric"], selection["lambda"], selection["tau"],
                    selection["label_share"])  # all three fixed: the one row there
    return {"keep": keep, "input_keys": selection["memory_input_keys"], **chosen}


def choose_keep(embeddings: str | os.PathLike, held: HeldOutLabels, settings: TuneSettings,
                memory_at: Callable[[float], MemorySettings], grid: tuple[float, ...],
                propensity_ab: tuple[float, float], device: str = "cpu") -> tuple[ValidationRetrieval, dict[str, Any]]:
    """The validation retrieval of the chosen keep and its selection (select's), with the keep, `auto.keep` and the
    keep curve (keep_row per keep tried, largest first) added. `memory_at` gives the memory settings at a keep."""
    original, rows = sorted(set(grid)), {}
    chosen: tuple[float, ValidationRetrieval, dict[str, Any]] | None = None
    pending = original
    while pending:
        for keep in sorted(pending, reverse=True):
            retrieval = validation_retrieval(embeddings, held, settings.b, device, memory_at(keep))
            selection = select(retrieval, settings, propensity_ab)
            rows[keep] = keep_row(keep, selection)
            if chosen is None or (rows[keep][settings.metric], keep) > (rows[chosen[0]][settings.metric], chosen[0]):
                chosen = keep, retrieval, selection
            del retrieval
        # keep, like τ, is a scale: widened by halving (or doubling, up to the full memory)
        widened = {min(1.0, k) for k in past_edge("tau", sorted(rows), chosen[0], original)}
        pending = [k for k in widened if k not in rows]
    keep, retrieval, selection = chosen
    curve = [rows[k] for k in sorted(rows, reverse=True)]
    return retrieval, {**selection, "keep": keep, "auto": {**selection["auto"], "keep": True}, "keep_curve": curve}


def keep_curve_metrics(curve: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The keep curve as MLflow metrics, one group per keep ("keep_curve.0.25.P@1" and so on)."""
    return {f"{row['keep']:g}": {k: v for k, v in row.items() if k != "keep"} for row in curve}
