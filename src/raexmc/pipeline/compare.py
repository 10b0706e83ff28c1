"""Comparing experiments through the MLflow store: the UI's compare view, and another run's artifacts."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from urllib.parse import urlencode

from ..errors import DataError
from .tracking.run import EXPERIMENT, tracking_uri

RUN_ID = r"[0-9a-f]{32}"  # how MLflow names its runs


def compare_url(experiment_names: list[str], ui: str = "http://127.0.0.1:5000") -> str:
    """The MLflow UI's compare view of the newest run of each named DVC experiment."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri())
    experiment = client.get_experiment_by_name(EXPERIMENT)
    if experiment is None:
        return ui
    runs = []
    for name in experiment_names:
        found = client.search_runs([experiment.experiment_id], filter_string=f"tags.dvc_experiment = '{name}'",
                                   order_by=["attributes.start_time DESC"], max_results=1)
        runs += [run.info.run_id for run in found]
    query = urlencode({"runs": json.dumps(runs), "experiments": json.dumps([experiment.experiment_id])})
    return f"{ui.rstrip('/')}/#/compare-runs?{query}"


def download_artifact(run_id: str, artifact_path: str) -> Path:
    """A local copy of one artifact of an MLflow run (for comparing against another experiment)."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    try:
        return Path(MlflowClient(tracking_uri()).download_artifacts(run_id, artifact_path))
    except MlflowException as exc:
        raise DataError(f"cannot fetch '{artifact_path}' of MLflow run: {exc.message.splitlines()[0]}", run_id) from None


def local_copy(source: str | os.PathLike, artifact_path: str) -> Path:
    """`source` itself when it is a path that exists, else a downloaded copy of `artifact_path` of
    the MLflow run whose id is `source` (for comparing against another experiment)."""
    path = Path(source)
    if path.exists():
        return path
    if not re.fullmatch(RUN_ID, str(source)):
        raise DataError("neither an existing file nor an MLflow run id (32 hex digits)", source)
    return download_artifact(str(source), artifact_path)
