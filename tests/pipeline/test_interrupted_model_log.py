"""A package stage killed (SIGKILL) while MLflow logs its model leaves that logged model PENDING in the store; the
next log's sweep marks it FAILED, in a real SQLite store, and leaves a log still under way alone."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from mlflow import MlflowClient
from mlflow.entities import LoggedModelStatus

from raexmc.pipeline.serving import WRITER_TAG, fail_interrupted_logs
from raexmc.pipeline.tracking.run import tracking_uri

LOGGER = """
import sys
from pathlib import Path
from raexmc.pipeline.serving import log_predictor
log_predictor(sys.argv[1], Path(sys.argv[2]), "raexmc-tiny", "candidate")
"""


def pending(client: MlflowClient, experiment: str) -> list:
    return [model for model in client.search_logged_models([experiment]) if model.status == LoggedModelStatus.PENDING]


def test_a_model_log_killed_midway_is_marked_failed_by_the_next_logs_sweep(tmp_path):
    client = MlflowClient(tracking_uri())
    experiment = client.create_experiment("killed-log", artifact_location=(tmp_path / "mlartifacts").as_uri())
    run_id = client.create_run(experiment).info.run_id
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "weights.bin").write_bytes(os.urandom(1 << 20) * 256)  # 256 MB to copy: the log takes a while
    logger = subprocess.Popen([sys.executable, "-c", LOGGER, run_id, str(folder)], env=os.environ.copy())
    deadline = time.monotonic() + 120
    while not pending(client, experiment) and logger.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    logger.kill()
    logger.wait()
    [left] = pending(client, experiment)  # what MLflow keeps of the killed log, for good without the sweep
    assert left.tags[WRITER_TAG].endswith(f":{logger.pid}")
    live = client.create_logged_model(experiment, tags={WRITER_TAG: left.tags[WRITER_TAG].replace(
        f":{logger.pid}", f":{os.getpid()}")})  # a log under way in a process that runs (this one)
    fail_interrupted_logs(client, experiment)
    assert client.get_logged_model(left.model_id).status == LoggedModelStatus.FAILED
    assert [model.model_id for model in pending(client, experiment)] == [live.model_id]
