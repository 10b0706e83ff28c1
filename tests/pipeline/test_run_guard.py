"""A stage logs only with the params it ran with, and runs alone in its working copy."""

from __future__ import annotations

import subprocess
import sys

import pytest

from raexmc.errors import ConcurrentRunError
from raexmc.pipeline.tracking.guard import dvc_targets, set_params
from raexmc.pipeline.tracking.run import stage_run
from test_tracking import runs
from tests.helpers import write_params


def test_set_params_reads_each_override_of_a_dvc_exp_run_and_dvc_targets_the_stages_it_names():
    args = ["exp", "run", "-n", "x", "-S", "infer.lambda=0.3", "--set-param", "params.yaml:train.lr=3e-4",
            "-Sinfer.b=50", "--set-param=+new.key=a=b", "-S", "~gone", "--temp", "download"]
    assert set_params(args) == [("params.yaml", "infer.lambda", "0.3"), ("params.yaml", "train.lr", "3e-4"),
                                ("params.yaml", "infer.b", "50"), ("params.yaml", "new.key", "a=b")]
    assert set_params(["repro", "-S", "infer.lambda=0.3"]) == []
    # the stage a command names runs last, so it writes the MLflow journal; a whole pipeline ends with track
    assert dvc_targets(["repro"]) == [] and dvc_targets(["exp", "run", "--temp"]) == []
    assert dvc_targets(["repro", "-f", "--single-item", "dvc.yaml:evaluate"]) == ["evaluate"]
    assert dvc_targets(["exp", "run", "-S", "infer.b=50", "download"]) == ["infer.b=50", "download"]
    assert dvc_targets(["exp", "exec-run", "--infofile", "x.run"]) is None, "a queued experiment: not read here"


@pytest.mark.parametrize("then", ["metrics", "run_id", "nothing"])
def test_params_changed_under_a_stage_stop_its_logging_and_fail_its_run(project, then):
    """Checked before each entry is logged, before the run's id is handed out (the model registry) and at the end."""
    with pytest.raises(ConcurrentRunError, match="params.yaml: changed while this stage ran"):
        with stage_run("tune") as run:
            run.metrics({"lambda": 0.3})
            (project / "params.yaml").write_text("data:\n  name: tiny\ninfer:\n  lambda: 0.7\n")
            if then == "metrics":
                run.metrics({"val_value": 1.0})
            elif then == "run_id":
                run.run_id
    _, found = runs()
    assert found[0].info.status == "FAILED"
    assert found[0].data.metrics == {"tune/lambda": 0.3}, "nothing logged after the change, no duration"


STAGE = """
import sys, time
import typer
from raexmc.pipeline.tracking.stage import tracked_stage

try:
    with tracked_stage(sys.argv[2]):
        print("ready", flush=True)
        time.sleep(float(sys.argv[1]))
except typer.Exit as stop:
    sys.exit(stop.exit_code)
"""


def stage_process(folder, seconds: float, name: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", STAGE, str(seconds), name], cwd=folder, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.slow  # several stage or torchrun processes: CI's second step
def test_a_second_stage_in_one_working_copy_is_refused_but_not_one_in_a_copy(project, tmp_path):
    write_params(project, **{"data.name": "tiny"})
    first = stage_process(project, 60, "train")
    try:
        assert first.stdout.readline().strip() == "ready"
        second = stage_process(project, 0, "evaluate")
        _, err = second.communicate(timeout=60)
        assert second.returncode == 2
        lock = project / ".dvc" / "tmp" / "raexmc-stage.lock"
        assert err.strip().splitlines() == [
            f"ConcurrentRunError: {lock}: stage 'train' of `dvc repro` (pid {first.pid}) is running in this "
            "workspace, and a second run here would rewrite its params; run experiments side by side with "
            "`raexmc sweep` or `dvc exp run --queue` (each runs in its own copy of the project)"]
        copy = tmp_path / "copy"  # what a queued or --temp experiment runs in
        (copy / ".dvc").mkdir(parents=True)
        (copy / "params.yaml").write_text((project / "params.yaml").read_text())
        in_copy = stage_process(copy, 0, "evaluate")
        assert in_copy.communicate(timeout=60)[0].strip() == "ready" and in_copy.returncode == 0
    finally:
        first.kill()
        first.wait()
    after = stage_process(project, 0, "evaluate")
    assert after.communicate(timeout=60)[0].strip() == "ready" and after.returncode == 0, \
        "the lock goes with its holder"
