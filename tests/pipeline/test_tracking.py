"""MLflow tracking on a real SQLite store: one run per pipeline execution, shared by its stages."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from raexmc.pipeline.tracking.identity import project_root
from raexmc.pipeline.tracking.run import EXPERIMENT, stage_run, tracking_uri
from tests.helpers import commit_all, set_dataset, sh


def runs():
    client = MlflowClient(tracking_uri())
    experiment = client.get_experiment_by_name(EXPERIMENT)
    return client, client.search_runs([experiment.experiment_id])


@pytest.fixture(params=["by hand", "under DVC"])
def mode(request, monkeypatch):
    """A stage run by hand writes its MLflow run itself; a stage DVC runs journals it for the track stage."""
    if request.param == "under DVC":
        monkeypatch.setenv("DVC_STAGE", "some-stage")
    return request.param


def test_stages_of_one_execution_share_a_run_which_a_failing_stage_marks_failed(project, mode):
    with stage_run("download") as run:
        run.params({"data": {"name": "tiny"}})
        run.metrics({"N_train": 4, "segments": {"head": 1}})
        (project / "stats.json").write_text('{"N_train": 4}')
        run.artifact(project / "stats.json")
    (project / "new.json").write_text("{}")
    (project / "new.json").rename(project / "stats.json")  # as a rerun replaces an output: the logged bytes stay
    with stage_run("tokenize") as run:
        run.params({"data.name": "tiny", "tokenize.max_len": 8})
    if mode == "under DVC":
        assert not Path(tracking_uri().removeprefix("sqlite:///")).exists(), "no stage but track opens the store"
        with stage_run("track"):
            pass
    client, found = runs()
    assert len(found) == 1
    data = found[0].data
    assert data.params == {"data.name": "tiny", "tokenize.max_len": "8"}
    assert data.metrics["download/N_train"] == 4 and data.metrics["download/segments.head"] == 1
    assert "download/duration_s" in data.metrics and "tokenize/duration_s" in data.metrics
    assert data.tags["dvc_experiment"] == "workspace"
    assert "mlflow.source.git.commit" not in data.tags, "no commit outside git (not a made-up one)"
    assert [a.path for a in client.list_artifacts(found[0].info.run_id, "download")] == ["download/stats.json"]
    logged = client.download_artifacts(found[0].info.run_id, "download/stats.json", str(project / "got"))
    assert Path(logged).read_text() == '{"N_train": 4}'
    assert found[0].info.status == "FINISHED"
    assert not (project / ".dvc" / "tmp" / "raexmc-journal").exists(), "the journal is emptied once written"
    with pytest.raises(RuntimeError):
        with stage_run("download"):
            raise RuntimeError("boom")
    assert [run.info.status for run in runs()[1]] == ["FAILED"]


_STAGE_UNDER_DVC = """
import sys
from raexmc.pipeline.tracking.run import stage_run
with stage_run("evaluate") as run:
    run.metrics({"rae": {"P@1": 50.0}})
print(sorted(name for name in ("mlflow", "sqlalchemy", "alembic") if name in sys.modules))
"""


def test_a_stage_dvc_runs_imports_no_mlflow(project):
    """Importing MLflow and its store's ORM cost each stage process some 2.7 CPU s: only the track stage pays it."""
    proc = subprocess.run([sys.executable, "-c", _STAGE_UNDER_DVC], capture_output=True, text=True, check=True,
                          env={**os.environ, "DVC_STAGE": "evaluate"})
    assert proc.stdout.strip() == "[]", proc.stderr


def test_changed_params_dataset_entry_or_experiment_start_a_new_run_which_holds_every_param(project, monkeypatch):
    """A new value in the chosen dataset's file, params.yaml the same, is another execution (it downloads other
    data), so another run. Each run holds every param and the chosen dataset's entry, even where a stage logs none."""
    (project / "params.yaml").write_text("data:\n  name: tiny\ninfer:\n  lambda: 0.3\n")
    set_dataset(project, "tiny", {"source": "local", "seed": 0})
    set_dataset(project, "other", {"source": "foldoc", "seed": 0})
    with stage_run("download") as run:
        run.params({"datasets.tiny": {"seed": 0}})
    set_dataset(project, "other", {"source": "foldoc", "seed": 1})  # not the chosen one: the same execution
    with stage_run("download") as run:
        run.params({"datasets.tiny": {"seed": 0}})
    set_dataset(project, "tiny", {"source": "local", "seed": 1})
    with stage_run("download") as run:
        run.params({"datasets.tiny": {"seed": 1}})
    (project / "params.yaml").write_text("data:\n  name: other\n")
    with stage_run("download"):
        pass
    monkeypatch.setenv("DVC_EXP_NAME", "sleek-gnus")
    with stage_run("download"):
        pass
    _, found = runs()
    assert len(found) == 4 and {r.info.run_name for r in found} >= {"sleek-gnus"}
    assert sorted(r.data.params["datasets.tiny.seed"] for r in found if "datasets.tiny.seed" in r.data.params) == \
        ["0", "1"]
    for params in (r.data.params for r in found):
        chosen, other = ("tiny", "other") if "infer.lambda" in params else ("other", "tiny")
        assert params[f"datasets.{chosen}.source"] == ("local" if chosen == "tiny" else "foldoc")
        assert not any(key.startswith(f"datasets.{other}") for key in params)
    assert sorted(r.data.params.get("infer.lambda", "-") for r in found) == ["-", "-", "0.3", "0.3"]


STAGE_UNTIL_KILLED = """
import time
from raexmc.pipeline.tracking.run import stage_run
with stage_run("train"):
    print("ready", flush=True)
    time.sleep(60)
"""


def test_a_killed_stage_marks_the_run_killed_and_exits_143(project, mode):
    stage = subprocess.Popen([sys.executable, "-c", STAGE_UNTIL_KILLED], stdout=subprocess.PIPE, text=True)
    assert stage.stdout.readline().strip() == "ready"
    stage.send_signal(signal.SIGTERM)
    assert stage.wait(timeout=30) == 128 + signal.SIGTERM
    if mode == "under DVC":  # it exits at once, and the next writer of the journal (track) closes the run
        with stage_run("track") as track:
            assert track.stages_run() == set(), "the killed stage never ended"
            assert runs()[1][0].info.status == "KILLED"
        return
    _, found = runs()
    assert found[0].info.status == "KILLED"


def in_temp_copy(project, monkeypatch, copy):
    """Run in the copy a `--temp` or queued experiment runs in, as DVC sets it up."""
    (copy / ".dvc").mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(copy)
    monkeypatch.setenv("DVC_ROOT", str(project))


def test_a_temp_experiment_logs_into_its_parent_s_store_one_run_when_the_parent_commits_meanwhile(project,
                                                                                                  monkeypatch):
    """The run key holds the commit the experiment's copy runs, not the parent's moving HEAD."""
    sh("git", "init", "-q", cwd=project)
    commit_all(project, "baseline")
    baseline = sh("git", "rev-parse", "HEAD", cwd=project).stdout.strip()
    copy = project / ".dvc" / "tmp" / "exps" / "tmp123"
    sh("git", "clone", "-q", str(project), str(copy), cwd=project)
    with monkeypatch.context() as default_store:
        default_store.delenv("MLFLOW_TRACKING_URI")
        assert tracking_uri() == f"sqlite:///{project / 'mlflow.db'}"
        in_temp_copy(project, default_store, copy)
        assert project_root() == project and tracking_uri() == f"sqlite:///{project / 'mlflow.db'}"
    in_temp_copy(project, monkeypatch, copy)
    monkeypatch.setenv("DVC_EXP_NAME", "ablation")
    with stage_run("download"):
        pass
    commit_all(project, "work goes on in the workspace")
    with stage_run("train"):
        pass
    _, found = runs()
    assert len(found) == 1
    assert found[0].data.tags["mlflow.source.git.commit"] == baseline


_OPEN_RUN = """
import sys
from raexmc.pipeline.tracking.run import stage_run
sys.stdin.readline()  # every process waits here, then all open the store at once
with stage_run("download") as run:
    run.metrics({"opened": 1})
"""


@pytest.mark.slow  # several stage or torchrun processes: CI's second step
def test_experiments_started_together_on_a_new_store_all_log(project, monkeypatch):
    """Queue workers of a first sweep open a store that does not exist yet at the same moment: MLflow's
    table creation and the experiment's creation must each happen once, not fail all but one."""
    for name in ("lam01", "lam02", "lam03", "lam04"):
        (project / name).mkdir()
        (project / name / "params.yaml").write_text(f"data:\n  name: {name}\n")
    monkeypatch.setenv("DVC_ROOT", str(project))  # as for queued experiments, each in its own copy
    workers = [subprocess.Popen([sys.executable, "-c", _OPEN_RUN], cwd=project / name, stdin=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env={**os.environ, "DVC_EXP_NAME": name})
               for name in ("lam01", "lam02", "lam03", "lam04")]
    for worker in workers:
        worker.stdin.write("go\n")
        worker.stdin.flush()
    errors = [worker.communicate(timeout=300)[1] for worker in workers]
    assert [worker.returncode for worker in workers] == [0] * 4, errors
    _, found = runs()
    assert sorted(r.data.tags["dvc_experiment"] for r in found) == ["lam01", "lam02", "lam03", "lam04"]
