"""Logging a stage into the pipeline's MLflow run (one per `dvc repro` or `dvc exp run`, keyed in identity.py)
through the journal one process writes to the store. The store is SQLite at the project root, so that `--temp` and
queued experiments (run in copies) land in it too; MLFLOW_TRACKING_URI overrides it."""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import math
import os
import re
import shutil
import signal
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager, suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ...errors import StorageError, first_line
from .guard import ParamsGuard, dvc_command, dvc_targets
from .identity import PIPELINE_TAG, pipeline_params, project_root, run_identity, working_copy

EXPERIMENT = "rae-xmc"
WRITER = "track"  # the stage that writes the journal: DVC runs it last, every time
JOURNAL = Path(".dvc", "tmp", "raexmc-journal")  # a working copy's, which its stages share one at a time
HEADLINE_METRICS = ("P@1", "P@5", "nDCG@5", "PSP@5", "R@100")  # the headline's: the summary's and the UI view's
HEADLINE_METHODS = ("rae", "dual_encoder", "knn")              # RAE, then its baselines
VIEW = "headline"  # the UI's runs table that `raexmc results` links (view_path)
_NOT_ALLOWED = re.compile(r"[^\w./\- :]")
# The folder's own record of what it holds: their bytes are its digest, so two folders of the same data share one
RECORD_FILES = ("stats.json", "source.json")
_SQLITE_HEADER = b"SQLite format 3\0"


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}: params as they are named in params.yaml and `dvc exp show`."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def metric_name(name: str) -> str:
    """MLflow allows only [A-Za-z0-9_.-/: ] in names: "rae.P@1" becomes "rae.P_at_1"."""
    return _NOT_ALLOWED.sub("_", name.replace("@", "_at_"))


def stage_metrics(stage: str, values: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of `values` under the names `stage` logs them by."""
    return {metric_name(f"{stage}/{k}"): float(v) for k, v in flatten(values).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def param_texts(values: Mapping[str, Any]) -> dict[str, str]:
    return {k: str(v)[:6000] for k, v in flatten(values).items()}  # MLflow's limit on a param's value


def folder_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for name in RECORD_FILES:
        if (folder / name).is_file():
            digest.update(name.encode() + b"\0" + (folder / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{project_root() / 'mlflow.db'}"


def store_file() -> str:
    """The store as a user would name it: the SQLite file, or the tracking URI itself."""
    uri = tracking_uri()
    return uri[len("sqlite:///"):] if uri.startswith("sqlite:///") else uri


@contextmanager
def readable_store() -> Iterator[None]:
    """A store that cannot be opened or read as one line naming it (not SQLAlchemy's traceback, MLflow's retries)."""
    check_store()
    with store_errors():
        yield


def check_store() -> None:
    """readable_store's check without importing MLflow: the SQLite header, then SQLite's check of its pages."""
    path = Path(store_file())
    if urlparse(tracking_uri()).scheme != "sqlite" or not path.exists():
        return  # MLflow creates it
    try:
        with open(path, "rb") as handle:
            head = handle.read(len(_SQLITE_HEADER))
        if head and head != _SQLITE_HEADER:
            raise sqlite3.DatabaseError("file is not a database")
        with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as db:
            answer = db.execute("PRAGMA quick_check").fetchone()[0]
    except OSError as exc:
        raise _store_error(exc.strerror) from None
    except sqlite3.DatabaseError as exc:
        raise _store_error(first_line(exc)) from None
    if answer != "ok":
        raise _store_error("database disk image is malformed")


@contextmanager
def store_errors() -> Iterator[None]:
    """SQLAlchemy's error (raised as it is, or as the cause of an MlflowException) as one line; MLflow's own
    traceback of it on stderr is held back meanwhile."""
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError

    db_log = logging.getLogger("mlflow.store.db.utils")
    level, db_log.level = db_log.level, logging.CRITICAL
    try:
        yield
    except (SQLAlchemyError, MlflowException) as exc:
        if isinstance(exc, MlflowException) and not from_the_store(exc):
            raise
        failed = exc.__cause__ if isinstance(exc, MlflowException) else exc
        raise _store_error(first_line(getattr(failed, "orig", None) or failed)) from None  # the database's own
    finally:
        db_log.setLevel(level)


def from_the_store(exc: BaseException) -> bool:
    """Whether MLflow raised `exc` because the store failed, not to say what the store holds or lacks."""
    from sqlalchemy.exc import SQLAlchemyError

    return isinstance(exc.__cause__, SQLAlchemyError)


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
    """Lock a SQLite store while opening it: queue workers starting together on a new store would otherwise
    each create MLflow's tables (all but one fail) or the experiment."""
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


class Journal:
    """What stages log, as JSON lines in `folder` until one process writes them to the store: importing MLflow costs
    a stage some 2.7 CPU s, so a stage DVC runs only appends, and track (run last) writes the journal once. An
    artifact is kept as a hard link (outputs are replaced by renames, so it holds the bytes the stage logged)."""

    def __init__(self, folder: Path):
        self.folder, self.lines = folder, folder / "entries.jsonl"

    def append(self, entry: dict[str, Any]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.lines, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")

    def keep(self, path: str | os.PathLike) -> str:
        self.folder.mkdir(parents=True, exist_ok=True)
        kept = Path(tempfile.mkdtemp(dir=self.folder)) / Path(path).name
        try:
            os.link(path, kept)
        except OSError:
            shutil.copy2(path, kept)
        return str(kept)

    def entries(self) -> list[dict[str, Any]]:
        if not self.lines.is_file():
            return []
        entries = []
        for line in self.lines.read_text(encoding="utf-8").splitlines():
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:
                break  # the last line, cut short by a kill (-9) while it was written
        return entries

    def clear(self) -> None:
        """Forget what was written to the store, the kept files with it."""
        shutil.rmtree(self.folder, ignore_errors=True)


class StageRun:
    """Journals a stage's params, metrics and artifacts, each after checking the params file is unchanged."""

    def __init__(self, journal: Journal, opening: dict[str, Any], stage: str, guard: ParamsGuard):
        self.journal, self.opening, self.stage, self.guard = journal, opening, stage, guard

    def _log(self, **entry: Any) -> None:
        self.guard.check()
        self.journal.append({"run": self.opening["run"], **entry})

    @property
    def run_id(self) -> str:
        """The run's id (for the model registry), after writing the journal to the store."""
        self.guard.check()
        return write_journal(self.journal, self.opening)

    def params(self, values: Mapping[str, Any]) -> None:
        self._log(params=param_texts(values))

    def metrics(self, values: Mapping[str, float], step: int = 0) -> None:
        now = int(time.time() * 1000)  # when the stage had them, not when the journal is written
        self._log(metrics=[[name, value, now, step] for name, value in stage_metrics(self.stage, values).items()])

    def artifact(self, *paths: str | os.PathLike) -> None:
        for path in paths:
            self._log(artifact=self.journal.keep(path), under=self.stage)

    def dataset(self, folder: Path, name: str, context: str) -> None:
        """The dataset folder as the run's dataset input (the store keeps one of each)."""
        self._log(dataset={"uri": str(folder.resolve()), "name": name, "digest": folder_digest(folder),
                           "context": context})

    def stages_run(self) -> set[str]:
        """Stages that ran in this execution (each logs its duration when it ends)."""
        run_id = write_journal(self.journal, self.opening)
        with store_errors():
            metrics = _client().get_run(run_id).data.metrics
        return {name.split("/")[0] for name in metrics if name.endswith("/duration_s")}

    def for_stage(self, stage: str) -> StageRun:
        """The run under another stage's names (for outputs DVC restored from its run cache)."""
        return StageRun(self.journal, self.opening, stage, self.guard)


def _client():
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri())


def experiment_tags() -> dict[str, str]:
    """MLflow 3 opens an experiment on its GenAI overview, with no metric column: so it says it is a model-training
    one and carries a shared view, the chosen settings and headline metrics first, best RAE P@1 on top."""
    settings = ("selection.retrieval", "selection.label_share", "selection.lambda", "selection.tau")  # evaluate's
    metrics = [f"metrics.`evaluate/{metric_name(f'{method}.{name}')}`"
               for method in HEADLINE_METHODS for name in HEADLINE_METRICS]
    columns = [*(f"params.`{name}`" for name in settings), "metrics.`evaluate/knn.tau`", *metrics]
    view = {"selectedColumns": columns, "columnOrder": columns, "orderByKey": metrics[0], "orderByAsc": False}
    return {"mlflow.experimentKind": "custom_model_development", f"mlflow.sharedViewState.{VIEW}": json.dumps(view)}


def view_path(experiment_id: str) -> str:
    return f"#/experiments/{experiment_id}/runs?viewStateShareKey={VIEW}"


def view_url(ui: str = "http://127.0.0.1:5000") -> str:
    with store_errors():
        experiment = _client().get_experiment_by_name(EXPERIMENT)
    return f"{ui}/{view_path(experiment.experiment_id)}" if experiment else ui


def _pipeline_run(client, key: str, opening: dict[str, Any]) -> str:
    experiment, tags = client.get_experiment_by_name(EXPERIMENT), experiment_tags()
    experiment_id = experiment.experiment_id if experiment else client.create_experiment(
        EXPERIMENT, artifact_location=(project_root() / "mlartifacts").as_uri(), tags=tags)
    if experiment and not tags.items() <= experiment.tags.items():  # a store an older rae-xmc made
        for name, value in tags.items():
            client.set_experiment_tag(experiment_id, name, value)
    found = client.search_runs([experiment_id], filter_string=f"tags.`{PIPELINE_TAG}` = '{key}'", max_results=1)
    if found:
        return found[0].info.run_id
    run_id = client.create_run(experiment_id, tags=opening["tags"], run_name=opening["name"]).info.run_id
    _log_params(client, run_id, opening["params"])
    return run_id


def _log_params(client, run_id: str, params: dict[str, str]) -> None:
    """Those of `params` the run lacks (MLflow refuses to change a param)."""
    from mlflow.entities import Param

    logged = client.get_run(run_id).data.params
    fresh = [Param(k, v) for k, v in params.items() if k not in logged]
    for start in range(0, len(fresh), 100):
        client.log_batch(run_id, params=fresh[start:start + 100])


def _dataset_input(uri: str, name: str, digest: str, context: str):
    """The folder at `uri` as a DatasetInput: described, never loaded (a MetaDataset)."""
    from mlflow.data import get_dataset_source_from_json
    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.entities import DatasetInput, InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    dataset = MetaDataset(get_dataset_source_from_json(json.dumps({"uri": uri}), "local"), name=name, digest=digest)
    return DatasetInput(dataset._to_mlflow_entity(), tags=[InputTag(MLFLOW_DATASET_CONTEXT, context)])


def write_journal(journal: Journal, opening: dict[str, Any]) -> str:
    """Write the journal's entries, in order, into their runs (found or created); empty it; `opening`'s run id."""
    from mlflow.entities import Metric

    entries = journal.entries()
    openings = {entry["run"]: entry["open"] for entry in [opening, *entries] if "open" in entry}
    with readable_store(), one_opener_at_a_time():
        client = _client()
        ids = {key: _pipeline_run(client, key, value) for key, value in openings.items()}
    with store_errors():
        for entry in entries:
            run_id = ids[entry["run"]]
            if "params" in entry:
                _log_params(client, run_id, entry["params"])
            for start in range(0, len(entry.get("metrics", ())), 1000):
                client.log_batch(run_id, metrics=[Metric(*m) for m in entry["metrics"][start:start + 1000]])
            if "artifact" in entry:
                client.log_artifact(run_id, entry["artifact"], artifact_path=entry["under"])
            if "dataset" in entry:
                client.log_inputs(run_id, datasets=[_dataset_input(**entry["dataset"])])
            if "status" in entry:
                client.set_terminated(run_id, status=entry["status"])
    journal.clear()
    return ids[opening["run"]]


def stage_journal(stage: str) -> tuple[Journal, bool]:
    """The journal `stage` appends to, and whether it writes it to the store: under DVC the working copy's, which the
    command's last stage writes (track, one it names, or every stage of a command not read here); by hand its own."""
    root = working_copy(Path.cwd()) if os.environ.get("DVC_STAGE") else None
    if root is None:  # nothing runs after it to write its journal
        return Journal(Path(tempfile.mkdtemp(prefix="raexmc-journal-"))), True
    args = dvc_command()
    targets = [] if args is None else dvc_targets(args)
    return Journal(root / JOURNAL), targets is None or stage == WRITER or stage in targets


class Terminated(BaseException):
    """SIGTERM as an exception, so that a killed stage still closes its MLflow run."""


@contextmanager
def sigterm_raises() -> Iterator[None]:
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
def stage_run(stage: str, guard: ParamsGuard | None = None) -> Iterator[StageRun]:
    """The pipeline's run for `stage`; on exit its duration and status: FINISHED, FAILED, or KILLED on Ctrl-C or
    SIGTERM (exit 143). A store that cannot be used ends the stage before its work."""
    guard = guard or ParamsGuard("params.yaml")
    journal, writes = stage_journal(stage)
    key, tags, name = run_identity(guard.path, guard.content or b"")
    opening = {"run": key, "open": {"tags": tags, "name": name, "params": param_texts(pipeline_params(guard.path))}}
    run = StageRun(journal, opening, stage, guard)
    if writes:
        write_journal(journal, run.opening)
    else:
        check_store()
        journal.append(run.opening)
    started = time.monotonic()
    try:
        with sigterm_raises():
            yield run
        guard.check()  # the stage's results were made with the params it read: else FAILED, so DVC records nothing
    except BaseException as exc:
        _mark_ended(run, exc, writes)
        if isinstance(exc, Terminated):
            raise SystemExit(128 + signal.SIGTERM) from None
        raise
    run.metrics({"duration_s": round(time.monotonic() - started, 3)})
    run._log(status="FINISHED")
    if writes:
        write_journal(journal, run.opening)


def _mark_ended(run: StageRun, exc: BaseException, writes: bool) -> None:
    """Journal a stage's end (KILLED by Ctrl-C or SIGTERM, else FAILED) and write it, unless the store fails (the error
    on its way out is the one to report). Killed under DVC, it leaves that to the next writer (MLflow loads slowly)."""
    killed = isinstance(exc, (Terminated, KeyboardInterrupt))
    with suppress(StorageError, OSError):
        run.journal.append({"run": run.opening["run"], "status": "KILLED" if killed else "FAILED"})
        if writes or not killed:
            write_journal(run.journal, run.opening)
