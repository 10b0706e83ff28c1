"""The tune stage's choice (its selection.json and the per-query λ fit) as MLflow metrics and as one line for
the user."""

from __future__ import annotations

from typing import Any

from .point_choice import curve_metrics
from .selection_file import Selection

CURVES = (("keep_curve", "keep"), ("prototypes_curve", "prototypes"))  # a selection's curves, by their axis


def choice_metrics(selection: Selection, fit: dict[str, Any]) -> dict[str, Any]:
    """The choice and each of its curves a point at a time; kNN's τ without its validation rows; the fit's report."""
    record = selection.record()  # the file's names, which the MLflow metrics keep
    curves = {name: curve_metrics(record[name], axis) for name, axis in CURVES if name in record}
    knn = selection.baselines.knn.model_dump(exclude_none=True, exclude={"validation"})
    return {**{k: v for k, v in record.items() if k not in ("validation", "baselines", *curves)}, **curves,
            "baselines": {"knn": knn}, "query_lambda": {**fit, "uses_model": int(fit["uses_model"])}}


def choice_line(selection: Selection, fit: dict[str, Any], fallback: float, chose_keep: bool) -> str:
    """What was chosen (the keep too where it was chosen), at which validation value, kNN's τ, and whether the
    per-query λ is a model or falls back to `fallback` for every query."""
    share = "" if selection.label_share is None else f" label_share={selection.label_share}"
    keep = f" keep={selection.keep}" if chose_keep else ""
    prototypes = "" if selection.prototypes is None else f" prototypes={selection.prototypes}"
    return (f"chose{keep}{prototypes} lambda={selection.lam} tau={selection.tau} "
            f"retrieval={selection.retrieval}{share} "
            f"(validation {selection.metric} {selection.val_value}, "
            f"{selection.fixed_val_value} at the fixed values); kNN tau={selection.knn_tau}; "
            f"per-query lambda: {'a model' if fit['uses_model'] else f'falls back to {fallback}'}")
