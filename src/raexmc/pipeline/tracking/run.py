"""Logging a stage into the pipeline's MLflow run (serving.py logs and registers the predictor model).

One MLflow run per pipeline execution: every stage of one `dvc repro` or `dvc exp run` finds the
run by a key derived from params.yaml, the git commit it runs and the DVC experiment name, and logs its
params, metrics, duration and artifacts into it. The store defaults to SQLite at the project
root so that `--temp` and queued experiments (which run in copies) land in the same place;
MLFLOW_TRACKING_URI overrides it.
"""

from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..paths import project_root
from .identity import PIPELINE_TAG, experiment_name, git_commit, pipeline_key, pipeline_params
from .names import flatten, metric_name
from .signals import Terminated, sigterm_raises

EXPERIMENT = "rae-xmc"


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{project_root() / 'mlflow.db'}"


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
        with sigterm_raises():
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
