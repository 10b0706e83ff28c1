"""Tuning the baselines as RAE is tuned: where the tune stage chooses RAE's τ (`infer.tau: auto`, alone or with λ,
the label share, the keep or the prototypes' α), kNN's τ is chosen on the same held-out queries for kNN alone, so
that RAE's lead and its paired t-tests are measured against a kNN at its own best, not at RAE's τ.

kNN is the top-b search over the training-input keys alone, scored λ = 1 on an input-only memory (the design's
"baselines are what their names say"), at its own b (methods.KNN_B, whatever RAE's infer.b): so its validation
curve is RAE's (selection.ValidationCurve) on the held-out inputs' top-KNN_B search of every remaining input (kNN's
memory, whatever `memory.keep` keeps for RAE) with no label key and no prior, at λ = 1. Its τ comes from the same
grid, widened past an edge and tie-broken by the same rule (selection.widen_and_choose, selection.choose). Where τ
is fixed, kNN runs at it: a user's τ applies to every method.

The dual encoder has nothing to choose: its scores are a softmax over its own retrieved labels, exp(s / τ) / Σ, which
rises with the similarity s at every τ > 0 (rae.scoring.dual_encoder_scores), so its ranking, and every metric, is the
same at any τ (but where a weight underflows to 0 and ties: a similarity gap above some 745·τ from the best label, at
cosines only below τ 0.003). How many labels it retrieves is its own depth (methods.baseline_depth: enough for R@100),
never RAE's b.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ..memory.search import empty_result
from .methods import HEADLINE, KNN_B
from .selection import ValidationCurve, choose, widen_and_choose
from .tune_settings import TuneSettings
from .validation_memory import ValidationRetrieval

KNN_LAMBDA = 1.0   # kNN is RAE at λ = 1 on an input-only memory


def input_only(retrieval: ValidationRetrieval) -> ValidationRetrieval:
    """kNN's validation retrieval: `retrieval`'s search of the input keys alone (at least KNN_B deep), with no label
    key and no prior, scored at kNN's own b."""
    if retrieval.b < KNN_B:
        raise ValueError(f"kNN's validation search must be {KNN_B} deep, got {retrieval.b}")
    return dataclasses.replace(retrieval, labels=empty_result(len(retrieval.held.val_rows), 0), log_counts=None,
                               b=KNN_B)


def select_knn(full_memory: Callable[[int], ValidationRetrieval], settings: TuneSettings,
               propensity_ab: tuple[float, float]) -> dict[str, Any]:
    """kNN's τ: with τ auto, the best of the curve of kNN alone on `full_memory(KNN_B)` (the held-out inputs' search
    of every remaining input at least KNN_B deep, called only then), with its validation value, its value at the fixed
    τ and the curve (rows {"tau", metric...}); with τ fixed, that τ."""
    if settings.tau is not None:
        return {"tau": settings.tau, "auto": {"tau": False}}
    curve, metric = ValidationCurve(input_only(full_memory(KNN_B)), propensity_ab), settings.metric
    grids = {"lambda": [KNN_LAMBDA], "tau": settings.taus(), "label_share": [None]}
    best = widen_and_choose(curve, grids, ("tau",), metric, {"lam": KNN_LAMBDA, "tau": None, "label_share": None})
    fixed = choose(curve.curve(), metric, KNN_LAMBDA, settings.fixed_tau)
    return {"tau": best["tau"], "auto": {"tau": True}, "val_value": best[metric], "fixed_tau": settings.fixed_tau,
            "fixed_val_value": fixed[metric],
            "validation": [{"tau": row["tau"], **{k: row[k] for k in HEADLINE}} for row in curve.curve()]}


def select_baselines(full_memory: Callable[[int], ValidationRetrieval], settings: TuneSettings,
                     propensity_ab: tuple[float, float]) -> dict[str, Any]:
    """What the tune stage writes under "baselines" in selection.json: kNN's setting (select_knn). The dual encoder
    has none to choose (see the module's docstring)."""
    return {"knn": select_knn(full_memory, settings, propensity_ab)}
