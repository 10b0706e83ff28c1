"""The MLflow UI's runs table with the chosen settings and the headline metrics of RAE and its baselines as its first
columns, the best RAE P@1 on top. MLflow 3 opens an experiment on its GenAI overview, and its runs table with no
metric column at all, so the experiment says it is a model-training one and carries that table as a shared view: an
experiment tag that the UI applies when its link names the view (`view_path`)."""

from __future__ import annotations

import json

from .names import metric_name

HEADLINE_METRICS = ("P@1", "P@5", "nDCG@5", "PSP@5", "R@100")
METHODS = ("rae", "dual_encoder", "knn")  # the headline's rows: RAE, then its baselines
VIEW = "headline"
SETTINGS = ("selection.retrieval", "selection.label_share", "selection.lambda", "selection.tau")  # evaluate's params


def _column(kind: str, name: str) -> str:
    return f"{kind}.`{name}`"  # how the UI names a column


def experiment_tags() -> dict[str, str]:
    """The experiment's tags for the view: its kind, and the view's columns and order."""
    metrics = [_column("metrics", f"evaluate/{metric_name(f'{method}.{name}')}")
               for method in METHODS for name in HEADLINE_METRICS]
    columns = [*(_column("params", name) for name in SETTINGS), _column("metrics", "evaluate/knn.tau"), *metrics]
    view = {"selectedColumns": columns, "columnOrder": columns, "orderByKey": metrics[0], "orderByAsc": False}
    return {"mlflow.experimentKind": "custom_model_development", f"mlflow.sharedViewState.{VIEW}": json.dumps(view)}


def view_path(experiment_id: str) -> str:
    """The view's link, after the UI's address."""
    return f"#/experiments/{experiment_id}/runs?viewStateShareKey={VIEW}"
