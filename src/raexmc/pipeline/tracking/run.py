"""Logging a stage into the pipeline's MLflow run (serving.py logs and registers the predictor model).

One MLflow run per pipeline execution: every stage of one `dvc repro` or `dvc exp run` finds the
run by a key derived from params.yaml, the git commit it runs and the DVC experiment name, and logs its
params, metrics, duration and artifacts into it. The store defaults to SQLite at the project
root so that `--temp` and queued experiments (which run in copies) land in the same place;
MLFLOW_TRACKING_URI overrides it.
"""

from __future__ import annotations

import fcntl
import logging
import math
import os
import signal
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ...errors import StorageError, first_line
from .dataset_input import dataset_input
from .guard import ParamsGuard
from .identity import PIPELINE_TAG, UNCOMMITTED, experiment_name, git_commit, pipeline_key, pipeline_params
from .names import flatten, metric_name
from .paths import project_root
from .signals import Terminated, sigterm_raises

EXPERIMENT = "rae-xmc"


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{project_root() / 'mlflow.db'}"


def store_file() -> str:
    """The store as a user would name it: the SQLite file, or the tracking URI itself."""
    uri = tracking_uri()
    return uri[len("sqlite:///"):] if uri.startswith("sqlite:///") else uri


_SQLITE_HEADER = b"SQLite format 3\0"


@contextmanager
def readable_store() -> Iterator[None]:
    """A store SQLite cannot open or read (not a database, truncated, unreadable) as one line
    naming the file, instead of SQLAlchemy's traceback (and MLflow's minutes of retries)."""
    if urlparse(tracking_uri()).scheme == "sqlite":
        try:
            _sqlite_header()
        except OSError as exc:
            raise _store_error(exc.strerror) from None
    with store_errors():
        yield


@contextmanager
def store_errors() -> Iterator[None]:
    """SQLAlchemy's error, opening the store or writing to it (a full disk), as one line: raised as it is, or
    as MLflow raises it again (an MlflowException caused by it). MLflow's own log of it, a traceback on
    stderr, is held back meanwhile: the one line says it all."""
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError

    db_log = logging.getLogger("mlflow.store.db.utils")
    level, db_log.level = db_log.level, logging.CRITICAL
    try:
        yield
    except SQLAlchemyError as exc:
        raise _store_error(_database_message(exc)) from None
    except MlflowException as exc:
        if not from_the_store(exc):
            raise
        raise _store_error(_database_message(exc.__cause__)) from None
    finally:
        db_log.setLevel(level)


def from_the_store(exc: BaseException) -> bool:
    """Whether MLflow raised `exc` because the store failed (SQLAlchemy's error is its cause), not to say
    what the store holds or lacks."""
    from sqlalchemy.exc import SQLAlchemyError

    return isinstance(exc.__cause__, SQLAlchemyError)


def _database_message(exc: BaseException) -> str:
    """The first line of SQLAlchemy's error: the database's own message ("database or disk is full")."""
    return first_line(getattr(exc, "orig", None) or exc)


def _store_error(reason: str) -> StorageError:
    store = store_file()
    if "disk is full" in reason:
        fix = "free some space and rerun"
    elif urlparse(tracking_uri()).scheme == "sqlite":
        fix = f"move it aside (mv {store} {store}.broken) and rerun for a new, empty store"
    else:
        fix = "check the store MLFLOW_TRACKING_URI names"
    return StorageError(f"the MLflow store cannot be used ({reason}): {fix}; the pipeline's outputs do not "
                        "depend on it", store)


@contextmanager
def one_opener_at_a_time() -> Iterator[None]:
    """Hold a lock beside a SQLite store while opening it and finding or creating the experiment and
    the pipeline's run: queue workers that start together on a new store would otherwise each create
    MLflow's tables (all but one fail) or the same experiment twice."""
    if urlparse(tracking_uri()).scheme != "sqlite":
        yield
        return
    try:
        handle = open(store_file() + ".lock", "a")
    except OSError as exc:  # the store's folder is missing or read-only: SQLite could not write there either
        raise _store_error(exc.strerror) from None
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _sqlite_header() -> None:
    """Read the store's first bytes: an unreadable file, a folder or another kind of file fails here."""
    path = Path(store_file())
    if not path.exists():
        return  # MLflow creates it
    with open(path, "rb") as handle:
        head = handle.read(len(_SQLITE_HEADER))
    if head and head != _SQLITE_HEADER:
        raise OSError(0, "file is not a database", str(path))


class StageRun:
    """Logs one stage's params, metrics and artifacts into the pipeline's MLflow run, each only
    after checking that the params file is still the one the stage ran with."""

    def __init__(self, client, run_id: str, stage: str, guard: ParamsGuard):
        self.client, self._run_id, self.stage, self.guard = client, run_id, stage, guard

    @property
    def run_id(self) -> str:
        """The run's id, for logging done elsewhere (the model registry): checked like every log."""
        self.guard.check()
        return self._run_id

    def params(self, values: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        self.guard.check()
        with store_errors():
            logged = self.client.get_run(self._run_id).data.params
            fresh = [Param(k, str(v)[:6000]) for k, v in flatten(values).items() if k not in logged]
            for start in range(0, len(fresh), 100):
                self.client.log_batch(self._run_id, params=fresh[start:start + 100])

    def metrics(self, values: Mapping[str, float], step: int = 0) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(metric_name(f"{self.stage}/{k}"), float(v), now, step) for k, v in flatten(values).items()
                 if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
        self.guard.check()
        with store_errors():
            for start in range(0, len(batch), 1000):
                self.client.log_batch(self._run_id, metrics=batch[start:start + 1000])

    def artifact(self, path: str | os.PathLike) -> None:
        self.guard.check()
        self.client.log_artifact(self._run_id, str(path), artifact_path=self.stage)

    def dataset(self, folder: Path, name: str, context: str) -> None:
        """Log the dataset folder the run used as its dataset input (once: the store keeps one of each)."""
        self.guard.check()
        with store_errors():
            self.client.log_inputs(self._run_id, datasets=[dataset_input(folder, name, context)])

    def stages_run(self) -> set[str]:
        """Stages that ran in this execution (each logs its duration when it ends)."""
        metrics = self.client.get_run(self._run_id).data.metrics
        return {name.split("/")[0] for name in metrics if name.endswith("/duration_s")}

    def for_stage(self, stage: str) -> StageRun:
        """The same run, logging under another stage's names (for outputs DVC restored from its
        run cache, whose stage did not run and so logged nothing)."""
        return StageRun(self.client, self._run_id, stage, self.guard)


def _pipeline_run(client, guard: ParamsGuard) -> str:
    from mlflow.utils.mlflow_tags import MLFLOW_GIT_COMMIT

    root = project_root()
    experiment = client.get_experiment_by_name(EXPERIMENT)
    experiment_id = (experiment.experiment_id if experiment else
                     client.create_experiment(EXPERIMENT, artifact_location=(root / "mlartifacts").as_uri()))
    commit, exp_name = git_commit(Path.cwd()), experiment_name()
    key = pipeline_key(guard.path, guard.content or b"", commit, exp_name)
    found = client.search_runs([experiment_id], filter_string=f"tags.`{PIPELINE_TAG}` = '{key}'", max_results=1)
    if found:
        return found[0].info.run_id
    tags = {PIPELINE_TAG: key, "dvc_experiment": exp_name}
    if commit != UNCOMMITTED:  # under MLflow's own key, which its UI shows as the run's source version
        tags[MLFLOW_GIT_COMMIT] = commit
    run_name = exp_name if exp_name != "workspace" else f"workspace-{key[:8]}"
    run_id = client.create_run(experiment_id, tags=tags, run_name=run_name).info.run_id
    StageRun(client, run_id, "pipeline", guard).params(pipeline_params(guard.path))
    return run_id


@contextmanager
def stage_run(stage: str, params_path: str | os.PathLike = "params.yaml",
              guard: ParamsGuard | None = None) -> Iterator[StageRun]:
    """Open the pipeline's MLflow run for `stage` (for the params file as `guard` read it); log its
    duration and final status on exit: FINISHED, FAILED on an error, KILLED on Ctrl-C or SIGTERM
    (then exit status 143, as if the signal had not been caught)."""
    from mlflow.tracking import MlflowClient

    guard = guard or ParamsGuard(params_path)
    with readable_store(), one_opener_at_a_time():
        client = MlflowClient(tracking_uri=tracking_uri())
        run_id = _pipeline_run(client, guard)
    run = StageRun(client, run_id, stage, guard)
    started = time.monotonic()
    try:
        with sigterm_raises():
            yield run
        guard.check()  # the stage's results were made with the params it read: else FAILED, so DVC records nothing
    except Terminated:
        _mark_ended(client, run_id, "KILLED")
        raise SystemExit(128 + signal.SIGTERM) from None
    except KeyboardInterrupt:
        _mark_ended(client, run_id, "KILLED")
        raise
    except BaseException:
        _mark_ended(client, run_id, "FAILED")
        raise
    run.metrics({"duration_s": round(time.monotonic() - started, 3)})
    with store_errors():
        client.set_terminated(run_id, status="FINISHED")


def _mark_ended(client, run_id: str, status: str) -> None:
    """Close a run that ends by an error, unless the store cannot take it (the error that is on its
    way out, such as that very store's, is the one to report)."""
    with suppress(StorageError), store_errors():
        client.set_terminated(run_id, status=status)
