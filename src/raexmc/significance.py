"""Significance of RAE against its baselines from per-instance metrics (paired t-tests)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from .errors import DataError
from .stats import paired_ttest

METHOD = "rae"
BASELINES = ("dual_encoder", "knn")


def load_per_instance(source: str | os.PathLike) -> dict[str, np.ndarray]:
    """Per-instance arrays ("method/metric" -> values) from a per_instance.npz or an MLflow run id."""
    path = Path(source)
    if not path.exists():
        from .tracking import download_artifact

        path = download_artifact(str(source), "evaluate/per_instance.npz")
    if not path.is_file():
        raise DataError("per-instance results not found", path)
    with np.load(path) as archive:
        return {key: archive[key] for key in archive.files}


def _test(a: dict[str, np.ndarray], a_method: str, b: dict[str, np.ndarray], b_method: str,
          metrics: list[str], origin: str) -> dict[str, Any]:
    out = {}
    for metric in metrics:
        for values, method in ((a, a_method), (b, b_method)):
            if f"{method}/{metric}" not in values:
                raise DataError(f"no per-instance '{method}/{metric}'", origin)
        # percentage points, as the metrics are reported
        out[metric] = paired_ttest(100 * a[f"{a_method}/{metric}"], 100 * b[f"{b_method}/{metric}"])
    return out


def compare_runs(run: dict[str, np.ndarray], metrics: list[str],
                 other: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
    """{"rae_vs_dual_encoder": {metric: test}, "rae_vs_knn": ...}; with `other` also each method
    against the same method of the other run ("rae_vs_other", "dual_encoder_vs_other", ...)."""
    report = {f"{METHOD}_vs_{baseline}": _test(run, METHOD, run, baseline, metrics, "per_instance.npz")
              for baseline in BASELINES}
    if other is not None:
        for method in (METHOD, *BASELINES):
            report[f"{method}_vs_other"] = _test(run, method, other, method, metrics, "significance.compare_with")
    return report
