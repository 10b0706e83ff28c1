"""The track and significance stages, run as DVC runs them, on hand-written result files and a real SQLite store:
what the pipeline's MLflow run holds afterwards (its metrics, its commit, its dataset input)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from raexmc.pipeline.results import KEY_METRICS
from raexmc.pipeline.tracking.run import EXPERIMENT, tracking_uri
from tests.helpers import REPO, commit_all, sh, write_params

TEST = {"mean_a": 52.3, "mean_b": 36.8, "mean_diff": 15.5, "ci_low": 12.9, "ci_high": 18.1, "t": 11.7,
        "p_value": 7.2e-31, "log10_p": -30.14, "n": 2057}
METRICS = {"rae": {"P@1": 52.3, "P@5": 24.1, "nDCG@5": 40.5, "PSP@5": 30.25, "R@100": 79.8},
           "dual_encoder": {"P@1": 36.8, "P@5": 15.5, "nDCG@5": 32.9, "PSP@5": 29.4, "R@100": 59.0},
           "knn": {"P@1": 48.4, "P@5": 22.6, "nDCG@5": 40.4, "PSP@5": 21.4, "R@100": 71.2, "tau": 0.07},
           "selection": {"auto": {"lambda": True, "tau": True}, "lambda": 0.1, "tau": 0.2, "metric": "P@1"}}


def project(root: Path) -> Path:
    """A committed DVC project holding the files the track stage reads: a dataset folder's records, the
    evaluation metrics, and a significance report of one test."""
    (root / ".dvc").mkdir()
    write_params(root, **{"data.name": "tiny"})
    data = root / "data" / "tiny"
    data.mkdir(parents=True)
    (data / "stats.json").write_text('{"N_train": 4, "N_test": 3, "L": 5}')
    (data / "source.json").write_text('{"source": "local", "path": "/somewhere/tiny"}')
    (root / "eval").mkdir()
    (root / "eval" / "metrics.json").write_text(json.dumps(METRICS))
    (root / "significance.json").write_text(json.dumps({"rae_vs_knn": {"P@1": TEST}}))
    (root / "selection.json").write_text('{"lambda": 0.1, "tau": 0.2, "retrieval": "joint", "label_share": null}')
    sh("git", "init", "-q", cwd=root)
    commit_all(root, "results")
    return root


def track(root: Path) -> str:
    """What the track stage printed."""
    return subprocess.run([sys.executable, str(REPO / "stages" / "track.py"), "--dataset", "data/tiny", "--eval",
                           "eval", "--significance", "significance.json", "--selection", "selection.json",
                           "--predictor", "predictor"],  # nothing ran in this execution: nothing to register
                          cwd=root, check=True, capture_output=True, text=True).stdout


def the_run():
    client = MlflowClient(tracking_uri())
    [run] = client.search_runs([client.get_experiment_by_name(EXPERIMENT).experiment_id])
    return run


def test_the_run_logs_of_each_t_test_its_difference_interval_and_log10_p_and_the_stage_prints_the_headline(tmp_path):
    """Each paired test used to be logged whole (means, t, p, n too): a third of a run's metrics. And `dvc repro` used
    to end with DVC's advice to git-add the lock: a user had to know `raexmc results`."""
    lines = track(project(tmp_path)).splitlines()
    logged = {name: value for name, value in the_run().data.metrics.items() if name.startswith("significance/")}
    assert logged == {"significance/rae_vs_knn.P_at_1.mean_diff": 15.5, "significance/rae_vs_knn.P_at_1.ci_low": 12.9,
                      "significance/rae_vs_knn.P_at_1.ci_high": 18.1, "significance/rae_vs_knn.P_at_1.log10_p": -30.14}
    assert json.loads((tmp_path / "significance.json").read_text())["rae_vs_knn"]["P@1"] == TEST, "the file keeps all"
    assert len(lines) <= 12, lines
    assert lines[0] == "λ = 0.1, τ = 0.2 (lambda and tau chosen on validation P@1); retrieval joint; kNN τ = 0.07"
    # the table's rows and tests, as summary() writes them: test_results.py's `raexmc results` test
    experiment = MlflowClient(tracking_uri()).get_experiment_by_name(EXPERIMENT).experiment_id
    view = f"http://127.0.0.1:5000/#/experiments/{experiment}/runs?viewStateShareKey=headline"
    assert lines[-1] == f"MLflow (`mlflow ui`): {view}"  # the view the UI test opens


@pytest.mark.slow  # several stage or torchrun processes: CI's second step
def test_the_run_carries_its_commit_under_mlflows_key_and_its_dataset_once(tmp_path):
    root = project(tmp_path)
    track(root)
    track(root)  # the track stage always runs: a rerun of the same execution logs into the same run
    run = the_run()
    assert run.data.tags["mlflow.source.git.commit"] == sh("git", "rev-parse", "HEAD", cwd=root).stdout.strip()
    [used] = run.inputs.dataset_inputs
    records = b"".join(name.encode() + b"\0" + (root / "data" / "tiny" / name).read_bytes() + b"\0"
                       for name in ("stats.json", "source.json"))
    assert (used.dataset.name, used.dataset.digest) == ("tiny", hashlib.sha256(records).hexdigest()[:16])
    assert (used.dataset.source_type, json.loads(used.dataset.source)) == ("local",
                                                                           {"uri": str(root / "data" / "tiny")})
    assert {tag.key: tag.value for tag in used.tags} == {"mlflow.data.context": "training"}


def test_the_significance_stage_logs_of_each_t_test_the_same_four_numbers(tmp_path):
    """RAE's P@1 on 4 test inputs against its baselines': the differences in points are hand-worked (RAE hits
    inputs 0, 1, 2; the dual encoder 0; kNN 0 and 1), and only the mean difference, interval and log10 p logged."""
    root = project(tmp_path)
    write_params(root, **{"data.name": "tiny", "significance.metrics": ["P@1"], "significance.compare_with": None})
    hits = {"rae": [1, 1, 1, 0], "dual_encoder": [1, 0, 0, 0], "knn": [1, 1, 0, 0]}
    np.savez(root / "eval" / "per_instance.npz", **{f"{method}/P@1": np.array(values, dtype=float)
                                                     for method, values in hits.items()})
    selection = {"selection": {"lambda": 0.5, "tau": 0.04}}
    (root / "eval" / "metrics.json").write_text(json.dumps({**selection, **{
        method: dict.fromkeys(KEY_METRICS, 1.0) for method in hits}}))
    subprocess.run([sys.executable, str(REPO / "stages" / "significance.py"), "--eval", "eval", "--out",
                    "significance.json", "--headline", "metrics"], cwd=root, check=True, capture_output=True)
    logged = {name: value for name, value in the_run().data.metrics.items() if name.startswith("significance/rae_")}
    fields = ("mean_diff", "ci_low", "ci_high", "log10_p")
    assert set(logged) == {f"significance/rae_vs_{baseline}.P_at_1.{field}"
                           for baseline in ("dual_encoder", "knn") for field in fields}
    assert logged["significance/rae_vs_dual_encoder.P_at_1.mean_diff"] == 50.0  # (0 + 100 + 100 + 0) / 4
    assert logged["significance/rae_vs_knn.P_at_1.mean_diff"] == 25.0  # (0 + 0 + 100 + 0) / 4
