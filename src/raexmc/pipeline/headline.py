"""The headline rows that `dvc metrics show` and `dvc metrics diff` read, a file each under metrics/<dataset>/:
RAE's and its two baselines' key metrics (RAE's row also with the λ and τ it used, kNN's with its own τ) and the
p-values of RAE against each baseline under the same metric names, all written by the significance stage. The full
tables (metrics.json with the variants and every metric, significance.json) stay outputs that MLflow gets.

Why a file per row: DVC shows one row per metrics file and one column per key of any of them, so three methods'
five metrics in one file are fifteen columns (some 200 characters), as rows five. A p-value is text in two
significant digits ("3.1e-12"): DVC prints a number to 5 significant digits, so one that underflowed would
read 0.0. The price: `dvc exp show` heads a column that several files share with the file's path
("metrics/foldoc/rae.json:P@1").
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..evaluation.significance import BASELINES, METHOD, p_value_text
from ..io import write_json

HEADLINE_METRICS = ("P@1", "P@5", "nDCG@5", "PSP@5", "R@100")
METHOD_ROWS = (METHOD, *BASELINES)                                   # rae.json, dual_encoder.json, knn.json
TEST_ROWS = tuple(f"{METHOD}_vs_{baseline}" for baseline in BASELINES)  # rae_vs_dual_encoder.json, rae_vs_knn.json


def method_rows(metrics: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """From the evaluate stage's metrics.json: RAE's and each baseline's headline metrics, on RAE's row the λ and
    τ it used (the tune stage's choice), and on kNN's the τ it used (its own where the tune stage chose RAE's;
    RAE's in a metrics.json written before kNN had its own). The dual encoder's ranking is the same at any τ: its
    row has none."""
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
