"""Two `dvc exp run -S` started together in one workspace: neither may log or register the other's params,
and the one that fails says why."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient


pytestmark = pytest.mark.slow

REFUSAL = "ConcurrentRunError: "


def start_experiment(repo, name: str, lam: float) -> subprocess.Popen:
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.Popen([sys.executable, "-m", "dvc", "exp", "run", "-n", name, "-S", f"infer.lambda={lam}"],
                            cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_two_workspace_experiments_never_mislabel_results(reproduced_project, monkeypatch):
    project = reproduced_project
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    own = {"lam03": 0.3, "lam07": 0.7}
    first = start_experiment(project, "lam03", 0.3)
    time.sleep(1)  # the second starts while the first is under way (DVC is still checking its stages)
    second = start_experiment(project, "lam07", 0.7)
    outputs = {name: proc.communicate(timeout=600)[0] for name, proc in (("lam03", first), ("lam07", second))}
    codes = {"lam03": first.returncode, "lam07": second.returncode}

    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("rae-xmc")  # None where neither got as far as logging
    runs = client.search_runs([experiment.experiment_id]) if experiment else []
    for run in runs:
        name = run.data.tags["dvc_experiment"]
        if name in own:
            assert float(run.data.params["infer.lambda"]) == own[name], f"MLflow run {name} holds another λ"
            if run.info.status == "FINISHED":
                assert run.data.metrics.get("tune/lambda", own[name]) == own[name]
    for name, lam in own.items():
        try:
            version = client.get_model_version_by_alias("raexmc-tiny", name)
        except MlflowException:  # no alias: that experiment registered nothing
            continue
        assert float(client.get_run(version.run_id).data.params["infer.lambda"]) == lam, f"alias {name}"

    failed = [name for name, code in codes.items() if code != 0]
    assert failed, f"one workspace cannot run both: {outputs}"
    for name in failed:  # stopped by a stage of ours, or first by DVC itself (its lock, or its own
        # workspace checks: under load the race goes either way), never silently
        assert REFUSAL in outputs[name] or "ERROR: " in outputs[name], outputs[name]
    refusals = [line for out in outputs.values() for line in out.splitlines() if REFUSAL in line]
    assert all(line.startswith(REFUSAL) and "raexmc sweep" in line and "dvc exp run --queue" in line
               for line in refusals)
