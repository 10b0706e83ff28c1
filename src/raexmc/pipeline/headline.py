"""The headline rows that `dvc metrics show` and `dvc metrics diff` read: a file per method with its key metrics
(RAE's also with the λ and τ it used; the evaluate stage), and a file per paired t-test with its p-value under
the same metric names (the significance stage). The full tables (metrics.json, significance.json) stay outputs
that MLflow gets, not DVC metrics.

Why a file per row: DVC shows one row per metrics file and one column per key of any of them, so four methods'
five metrics in one file are twenty columns (some 200 characters), as rows five. A p-value is text in two
significant digits ("3.1e-12"): DVC prints a number to 5 significant digits, so one that underflowed would
read 0.0. The price: `dvc exp show` heads a column that several files share with the file's path
("metrics/foldoc/methods/rae.json:P@1").
"""

from __future__ import annotations

import os
from typing import Any

from ..evaluation.significance import p_value_text
from ..io import atomic_dir, write_json

HEADLINE_METRICS = ("P@1", "P@5", "nDCG@5", "PSP@5", "R@100")
METHODS_FOLDER, TESTS_FOLDER = "methods", "tests"   # under metrics/<dataset>/, as dvc.yaml names them


def method_rows(metrics: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """From the evaluate stage's metrics.json: each method's headline metrics, and on RAE's row the λ and τ
    it used (the tune stage's choice)."""
    rows = {method: {name: summary[name] for name in HEADLINE_METRICS} for method, summary in metrics.items()
            if isinstance(summary, dict) and all(name in summary for name in HEADLINE_METRICS)}
    rows["rae"]["lambda"], rows["rae"]["tau"] = metrics["selection"]["lambda"], metrics["selection"]["tau"]
    return rows


def p_value_rows(report: dict[str, Any]) -> dict[str, dict[str, str]]:
    """From the significance stage's report: each comparison's p-value per metric, as text."""
    return {comparison: {metric: p_value_text(test) for metric, test in by_metric.items()}
            for comparison, by_metric in report.items()}


def write_rows(folder: str | os.PathLike, rows: dict[str, dict[str, Any]]) -> None:
    """One <row>.json per row in `folder`, written atomically (all rows or none)."""
    with atomic_dir(folder) as tmp:
        for name, row in rows.items():
            write_json(tmp / f"{name}.json", row)
