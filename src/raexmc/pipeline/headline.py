"""The headline rows of `dvc metrics show` and `dvc metrics diff`, a file each under metrics/<dataset>/: RAE's
and its baselines' key metrics (RAE's with its λ and τ, kNN's with its τ) and RAE's p-values against each,
written by the significance stage; the full tables stay outputs MLflow gets.

A file a row, since DVC shows a row per file and a column per key: three methods' five metrics in one file are
fifteen columns. A p-value is text of two digits ("3.1e-12"): DVC prints 5 significant digits, so one that
underflowed would read 0.0. The price: `dvc exp show` heads a shared column with the path.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..evaluation.significance import BASELINES, METHOD, p_value_text
from ..io import write_json
from .tracking.headline_view import HEADLINE_METRICS
from .tracking.headline_view import METHODS as METHOD_ROWS  # rae.json, dual_encoder.json, knn.json

TEST_ROWS = tuple(f"{METHOD}_vs_{baseline}" for baseline in BASELINES)  # rae_vs_dual_encoder.json, rae_vs_knn.json


def method_rows(metrics: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """From metrics.json: RAE's and each baseline's headline metrics, RAE's with its λ and τ, kNN's with its
    τ (RAE's in an older metrics.json); the dual encoder ranks alike at any τ: none."""
    rows = {method: {name: metrics[method][name] for name in HEADLINE_METRICS} for method in METHOD_ROWS}
    rows[METHOD].update({"lambda": metrics["selection"]["lambda"], "tau": metrics["selection"]["tau"]})
    rows["knn"]["tau"] = metrics["knn"].get("tau", metrics["selection"]["tau"])
    return rows


def p_value_rows(report: dict[str, Any]) -> dict[str, dict[str, str]]:
    """From the significance stage's report: RAE against each baseline, its p-value per metric, as text."""
    return {test: {metric: p_value_text(result) for metric, result in report[test].items()} for test in TEST_ROWS}


def write_rows(folder: str | os.PathLike, rows: dict[str, dict[str, Any]]) -> None:
    """<row>.json in `folder` for each row (each written atomically)."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    for name, row in rows.items():
        write_json(Path(folder) / f"{name}.json", row)
