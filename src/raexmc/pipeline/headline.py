"""The headline files that `dvc metrics show`, `dvc metrics diff` and `dvc exp show` read: the key metrics of
RAE and its two baselines with the λ and τ RAE used (the evaluate stage), and the p-values of RAE against each
baseline (the significance stage). The full tables (metrics.json, significance.json) stay outputs that MLflow
gets, not DVC metrics: DVC shows one column per number of every metrics file, and at 4 methods x 30 numbers
that is hundreds of columns.

Each file has keys no other file has, so that `dvc exp show` heads a column with the key alone (it names the
file too where two files share a key). A p-value is a string in two significant digits ("3.1e-12"): DVC prints
a number with 5 significant digits, so one that underflowed would read 0.0.
"""

from __future__ import annotations

from typing import Any

from ..evaluation.significance import BASELINES, METHOD, p_value_text

HEADLINE_METRICS = ("P@1", "P@5", "nDCG@5", "PSP@5", "R@100")
HEADLINE_METHODS = (METHOD, *BASELINES)


def headline_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """From the evaluate stage's metrics.json: the λ and τ RAE used and each headline method's key metrics."""
    return {"lambda": metrics["selection"]["lambda"], "tau": metrics["selection"]["tau"],
            **{method: {name: metrics[method][name] for name in HEADLINE_METRICS} for method in HEADLINE_METHODS}}


def headline_p_values(report: dict[str, Any], metric: str) -> dict[str, Any]:
    """From the significance stage's report: the p-value of RAE against each baseline on `metric`, as text."""
    return {f"p_{metric}": {f"vs_{baseline}": p_value_text(report[f"{METHOD}_vs_{baseline}"][metric])
                            for baseline in BASELINES}}
