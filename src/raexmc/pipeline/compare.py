"""Comparing experiments through the MLflow store: the UI's compare view, another run's artifacts, and a figure
that a stage logs to MLflow alone."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlparse

from ..errors import DataError
from .tracking.run import EXPERIMENT, metric_name, readable_store, stage_metrics, store_file, tracking_uri

RUN_ID = r"[0-9a-f]{32}"  # how MLflow names its runs


def compare_url(experiment_names: list[str], ui: str) -> str:
    """The compare view, in the MLflow UI at `ui`, of the newest run of each named DVC experiment."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri())
    experiment = client.get_experiment_by_name(EXPERIMENT)
    if experiment is None:
        return ui
    runs = [run.info.run_id for name in experiment_names  # the newest of each
            for run in client.search_runs([experiment.experiment_id], filter_string=f"tags.dvc_experiment = '{name}'",
                                          order_by=["attributes.start_time DESC"], max_results=1)]
    query = urlencode({"runs": json.dumps(runs), "experiments": json.dumps([experiment.experiment_id])})
    return f"{ui.rstrip('/')}/#/compare-runs?{query}"


def local_copy(source: str | os.PathLike, artifact_path: str) -> Path:
    """`source` where it is a path, else a local copy of `artifact_path` of MLflow run `source`."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    path = Path(source)
    if path.exists():
        return path
    if not re.fullmatch(RUN_ID, str(source)):
        raise DataError("neither an existing file nor an MLflow run id (32 hex digits)", source)
    try:
        return Path(MlflowClient(tracking_uri()).download_artifacts(str(source), artifact_path))
    except MlflowException as exc:
        raise DataError(f"cannot fetch '{artifact_path}' of MLflow run: {exc.message.splitlines()[0]}",
                        source) from None


def logged_figure(stage: str, name: str, outputs: Mapping[str, Any]) -> float | None:
    """`<stage>/<name>` of the newest MLflow run whose `<stage>` metrics hold all of `outputs`, else None."""
    from mlflow.tracking import MlflowClient

    if urlparse(tracking_uri()).scheme == "sqlite" and not Path(store_file()).is_file():
        return None  # no store yet: nothing was logged, and opening it would create one
    with readable_store():
        client = MlflowClient(tracking_uri())
        experiment = client.get_experiment_by_name(EXPERIMENT)
        runs = [] if experiment is None else client.search_runs([experiment.experiment_id],
                                                                order_by=["attributes.start_time DESC"])
    wanted, figure = stage_metrics(stage, outputs), metric_name(f"{stage}/{name}")
    for run in runs:
        logged = run.data.metrics
        if figure in logged and all(logged.get(key) == value for key, value in wanted.items()):
            return logged[figure]
    return None
