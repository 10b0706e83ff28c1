"""MLflow run tracking for the stages (serving.py logs and registers the predictor model).

One MLflow run per pipeline execution: every stage of one `dvc repro` or `dvc exp run` finds the
run by a key derived from params.yaml, the git commit it runs and the DVC experiment name, and logs its
params, metrics, duration and artifacts into it. The store defaults to SQLite at the project
root so that `--temp` and queued experiments (which run in copies) land in the same place;
MLFLOW_TRACKING_URI overrides it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from ..paths import project_root

EXPERIMENT = "rae-xmc"
_NOT_ALLOWED = re.compile(r"[^\w./\- :]")
PIPELINE_TAG = "raexmc.pipeline_key"


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{project_root() / 'mlflow.db'}"


def git_commit(folder: Path) -> str:
    """HEAD of `folder`: for an experiment, pass its own copy (the code it runs), not the parent
    project, whose HEAD may move while the experiment runs."""
    proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else "uncommitted"


def experiment_name() -> str:
    """The DVC experiment being run, or "workspace" for a plain `dvc repro`."""
    return os.environ.get("DVC_EXP_NAME") or "workspace"


def pipeline_key(params_path: Path, commit: str, exp_name: str) -> str:
    digest = hashlib.sha256(params_path.read_bytes())
    digest.update(f"\0{commit}\0{exp_name}".encode())
    return digest.hexdigest()[:16]


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}: params as they are named in params.yaml and `dvc exp show`."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def metric_name(name: str) -> str:
    """MLflow allows only [A-Za-z0-9_.-/: ] in names: "rae.P@1" becomes "rae.P_at_1"."""
    return _NOT_ALLOWED.sub("_", name.replace("@", "_at_"))


class StageRun:
    """Logs one stage's params, metrics and artifacts into the pipeline's MLflow run."""

    def __init__(self, client, run_id: str, stage: str):
        self.client, self.run_id, self.stage = client, run_id, stage

    def params(self, values: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        logged = self.client.get_run(self.run_id).data.params
        fresh = [Param(k, str(v)[:6000]) for k, v in flatten(values).items() if k not in logged]
        for start in range(0, len(fresh), 100):
            self.client.log_batch(self.run_id, params=fresh[start:start + 100])

    def metrics(self, values: Mapping[str, float], step: int = 0) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(metric_name(f"{self.stage}/{k}"), float(v), now, step) for k, v in flatten(values).items()
                 if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
        for start in range(0, len(batch), 1000):
            self.client.log_batch(self.run_id, metrics=batch[start:start + 1000])

    def artifact(self, path: str | os.PathLike) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path=self.stage)

    def stages_run(self) -> set[str]:
        """Stages that ran in this execution (each logs its duration when it ends)."""
        metrics = self.client.get_run(self.run_id).data.metrics
        return {name.split("/")[0] for name in metrics if name.endswith("/duration_s")}

    def for_stage(self, stage: str) -> StageRun:
        """The same run, logging under another stage's names (for outputs DVC restored from its
        run cache, whose stage did not run and so logged nothing)."""
        return StageRun(self.client, self.run_id, stage)


def _pipeline_run(client, params_path: Path) -> str:
    root = project_root()
    experiment = client.get_experiment_by_name(EXPERIMENT)
    experiment_id = (experiment.experiment_id if experiment else
                     client.create_experiment(EXPERIMENT, artifact_location=(root / "mlartifacts").as_uri()))
    commit, exp_name = git_commit(Path.cwd()), experiment_name()
    key = pipeline_key(params_path, commit, exp_name)
    found = client.search_runs([experiment_id], filter_string=f"tags.`{PIPELINE_TAG}` = '{key}'", max_results=1)
    if found:
        return found[0].info.run_id
    tags = {PIPELINE_TAG: key, "git_commit": commit, "dvc_experiment": exp_name}
    run_name = exp_name if exp_name != "workspace" else f"workspace-{key[:8]}"
    run_id = client.create_run(experiment_id, tags=tags, run_name=run_name).info.run_id
    StageRun(client, run_id, "pipeline").params(pipeline_params(params_path))
    return run_id


def pipeline_params(params_path: Path) -> dict[str, Any]:
    """Every param of the execution, the chosen dataset's entry included, so that runs in which
    DVC reran only the last stages still compare side by side on all of them."""
    from ...params import load_params

    tree = load_params(params_path).data
    chosen = tree.get("data", {}).get("name")
    picked = {key: value for key, value in tree.items() if key not in ("datasets", "presets")}
    if chosen in tree.get("datasets", {}):
        picked[f"datasets.{chosen}"] = tree["datasets"][chosen]
    return picked


class Terminated(BaseException):
    """SIGTERM as an exception, so that a killed stage still closes its MLflow run."""


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    """Without this a `kill` (or torchrun stopping its workers) leaves the run RUNNING forever."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_terminated(signum, frame):
        raise Terminated

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def stage_run(stage: str, params_path: str | os.PathLike = "params.yaml") -> Iterator[StageRun]:
    """Open the pipeline's MLflow run for `stage`; log its duration and final status on exit:
    FINISHED, FAILED on an error, KILLED on Ctrl-C or SIGTERM (then exit status 143, as if the
    signal had not been caught)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri())
    run = StageRun(client, _pipeline_run(client, Path(params_path)), stage)
    started = time.monotonic()
    try:
        with _sigterm_raises():
            yield run
    except Terminated:
        client.set_terminated(run.run_id, status="KILLED")
        raise SystemExit(128 + signal.SIGTERM) from None
    except KeyboardInterrupt:
        client.set_terminated(run.run_id, status="KILLED")
        raise
    except BaseException:
        client.set_terminated(run.run_id, status="FAILED")
        raise
    run.metrics({"duration_s": round(time.monotonic() - started, 3)})
    client.set_terminated(run.run_id, status="FINISHED")


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

    from ...errors import DataError

    try:
        return Path(MlflowClient(tracking_uri()).download_artifacts(run_id, artifact_path))
    except MlflowException as exc:
        raise DataError(f"cannot fetch '{artifact_path}' of MLflow run: {exc.message.splitlines()[0]}", run_id) from None


def local_copy(source: str | os.PathLike, artifact_path: str) -> Path:
    """`source` itself when it is a path that exists, else a downloaded copy of `artifact_path` of
    the MLflow run whose id is `source` (for comparing against another experiment)."""
    path = Path(source)
    return path if path.exists() else download_artifact(str(source), artifact_path)
