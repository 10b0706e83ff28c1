"""The MLflow UI's compare view puts two pipeline runs side by side: a real `mlflow ui` against a project store, asked
over its REST API and, in the slow test, read by headless Chromium (`scripts/setup.sh --test` installs it)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from raexmc.pipeline.compare import compare_url
from raexmc.pipeline.tracking.run import EXPERIMENT, stage_run, tracking_uri, view_path
from tests.helpers import local_server

BROWSER_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--hide-scrollbars", "--virtual-time-budget=20000",
                 "--window-size=1600,2400"]


def log_pipeline_run(project: Path, exp_name: str, lam: float, p_at_1: float, monkeypatch) -> str:
    (project / "params.yaml").write_text(f"data:\n  name: tiny\ninfer:\n  lambda: {lam}\n")
    monkeypatch.setenv("DVC_EXP_NAME", exp_name)
    with stage_run("evaluate") as run:
        run.params({"selection": {"lambda": lam, "tau": 0.2, "retrieval": "joint"}})
        run.metrics({"rae": {"P@1": p_at_1, "P@5": p_at_1 / 2}, "dual_encoder": {"P@1": 30.25}, "knn": {"tau": 0.07}})
        return run.run_id


RUNS = {"sweep-lambda-0.3": (0.3, 41.37), "sweep-lambda-0.7": (0.7, 63.52)}  # experiment: (λ, P@1)


@pytest.fixture
def ui(tmp_path, monkeypatch) -> Iterator[tuple[str, dict[str, str]]]:
    """Two experiments' runs in a project store, and `mlflow ui` serving it on a free port:
    (its base URL, {experiment name: run id})."""
    project = tmp_path / "project"
    (project / ".dvc").mkdir(parents=True)
    monkeypatch.chdir(project)
    runs = {name: log_pipeline_run(project, name, lam, p_at_1, monkeypatch) for name, (lam, p_at_1) in RUNS.items()}
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", tracking_uri(), "--host", "127.0.0.1",
               "--workers", "1"]  # one server process, not its default four, each importing MLflow's server
    with local_server(lambda port: [*command, "--port", str(port)], "/health") as base:
        yield base, runs


def browser(*args: str, profile: Path) -> subprocess.CompletedProcess:
    binary = shutil.which("chromium")
    assert binary, "Debian's chromium is needed: run `scripts/setup.sh --test` (as root) or apt-get install chromium"
    return subprocess.run([binary, *BROWSER_FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                          text=True, timeout=180)


def test_the_ui_serves_each_run_under_its_experiments_name_with_its_p_at_1(ui):
    """The REST call the compare view makes for each run it shows (no browser: seconds, in the default run)."""
    base, runs = ui
    for name, run_id in runs.items():
        with urllib.request.urlopen(f"{base}/ajax-api/2.0/mlflow/runs/get?run_id={run_id}", timeout=30) as answer:
            run = json.load(answer)["run"]
        assert run["info"]["run_name"] == name
        metrics = {metric["key"]: metric["value"] for metric in run["data"]["metrics"]}
        assert metrics["evaluate/rae.P_at_1"] == RUNS[name][1]


@pytest.mark.slow
def test_the_compare_and_headline_views_show_the_runs_with_the_best_rae_first(ui, tmp_path):
    """The links `raexmc sweep` and `raexmc results` print. The headline view is the runs table (not MLflow 3's
    GenAI overview), sorted by RAE's P@1, with the chosen settings and the headline metrics as columns (MLflow's
    own table shows no metric)."""
    base, _ = ui
    experiment = MlflowClient(tracking_uri()).get_experiment_by_name(EXPERIMENT).experiment_id
    views = {"compare": compare_url(list(RUNS), base), "headline": f"{base}/{view_path(experiment)}"}
    compare, page = (browser("--dump-dom", view, profile=tmp_path / "profile").stdout for view in views.values())
    assert "Comparing 2 Runs" in compare
    assert "sweep-lambda-0.3" in compare and "sweep-lambda-0.7" in compare
    assert "evaluate/rae.P_at_1" in compare and "41.37" in compare and "63.52" in compare
    for column in ("selection.lambda", "selection.retrieval", "evaluate/knn.tau", "evaluate/rae.P_at_1",
                   "evaluate/dual_encoder.P_at_1"):
        assert column in page, column
    assert "30.25" in page and "63.52" in page
    assert page.index("sweep-lambda-0.7") < page.index("sweep-lambda-0.3")  # P@1 63.52 above 41.37
    for name, view in views.items():
        screenshot = tmp_path / f"mlflow-{name}.png"
        browser(f"--screenshot={screenshot}", view, profile=tmp_path / "profile")
        assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and screenshot.stat().st_size > 20_000
