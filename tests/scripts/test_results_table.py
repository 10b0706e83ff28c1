"""scripts/results_table.py: our runs' and the peers' rows per dataset, RAE tested against the best other row."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.stats

from raexmc.errors import DataError
from raexmc.pipeline.tracking.run import stage_run
from tests.helpers import REPO, load_module

METRICS = ("P@1", "P@5", "nDCG@5", "PSP@5", "R@100")
RAE_P1 = [1.0, 1.0, 0.0, 1.0]
KNN_P1 = [0.0, 1.0, 0.0, 0.0]
PEER_P1 = [1.0, 1.0, 0.0, 0.0]


@pytest.fixture
def results_table():
    return load_module(REPO / "scripts/results_table.py")


def write_run(folder, per_method, params=True, mode="fine-tuned", queries_per_s=2000.0):
    """A run folder; queries_per_s=None writes metrics.json as the evaluate stage does now (the timing goes to
    MLflow alone), a number as it did before."""
    folder.mkdir(parents=True)
    if params:
        (folder / "params.yaml").write_text(f"data:\n  name: toy\nencoder:\n  mode: {mode}\ninfer:\n  lambda: 0.5\n")
    metrics = {m: {k: 100 * float(np.mean(v)) for k in METRICS} for m, v in per_method.items()}
    metrics["retrieval"] = {"depth": 200, **({} if queries_per_s is None else {"queries_per_s": queries_per_s})}
    (folder / "metrics.json").write_text(json.dumps(metrics))
    np.savez(folder / "per_instance.npz", **{f"{m}/{k}": np.asarray(v) for m, v in per_method.items() for k in METRICS})


def write_peer(results, values):
    results.mkdir(parents=True, exist_ok=True)
    report = {"dataset": "toy", "peer": "tree", "model": "a tree peer", "train_s": 3.0, "predict_s_per_1k": 0.5,
              "model_mb": 1.5, "metrics": {k: 100 * float(np.mean(values)) for k in METRICS}}
    (results / "tree_toy.json").write_text(json.dumps(report))
    np.savez(results / "tree_toy.npz", **{f"tree/{k}": np.asarray(values) for k in METRICS})


def test_rae_is_tested_against_the_best_non_rae_row_by_p1(results_table, tmp_path):
    results = tmp_path / "results"
    write_run(results / "runs" / "toy_tuned", {"rae": RAE_P1, "knn": KNN_P1})
    (results / "stage_resources_toy_tuned.json").write_text(json.dumps({"train": {"wall_s": 42.0}}))
    write_peer(results, PEER_P1)

    rows = results_table.build_tables([results / "runs" / "toy_tuned"], results)["toy"]

    # by P@1: 75, 50, 25
    assert [row["name"] for row in rows] == ["toy_tuned: RAE λ=0.5", "a tree peer", "toy_tuned: kNN"]
    rae = rows[0]
    assert (rae["train_s"], rae["predict_s_per_1k"]) == (42.0, 0.5)
    assert rae["vs"] == "a tree peer"
    # paired t by hand: differences 0, 0, 0, 1: mean 1/4, sd 1/2, t = (1/4) / (sd / sqrt(4)) = 1, 3 dof
    expected = 2 * scipy.stats.t.sf(1.0, 3)
    for metric in METRICS:
        assert rae["p"][metric] == pytest.approx(expected, abs=1e-9)
    assert "p" not in rows[1] and "p" not in rows[2]
    # the same test against the best peer, its difference in points: 100 x 1/4
    assert rae["vs_peer"]["name"] == "a tree peer" and rae["vs_peer"]["P@1"] == pytest.approx(50.0, abs=1e-9)
    assert rae["vs_peer"]["diff"]["P@1"] == pytest.approx(25.0, abs=1e-9)
    assert rae["vs_peer"]["p"]["P@1"]["p_value"] == pytest.approx(expected, abs=1e-9)


def test_tables_are_written_as_markdown_and_json_and_a_run_of_unknown_dataset_is_refused(results_table, tmp_path,
                                                                                           monkeypatch):
    results = tmp_path / "results"
    write_run(tmp_path / "artifacts" / "toy" / "eval", {"rae": RAE_P1}, params=False)  # dataset from the layout
    write_peer(results, PEER_P1)
    monkeypatch.chdir(tmp_path)

    results_table.main([tmp_path / "artifacts" / "toy" / "eval"], results)

    table = (results / "results_table.md").read_text()
    assert "### toy" in table
    assert "| toy: RAE | 75.00 | 75.00 | 75.00 | 75.00 | 75.00 | — | 0.500 | — | vs a tree peer:" in table
    saved = json.loads((results / "results_table.json").read_text())
    assert [row["name"] for row in saved["toy"]] == ["toy: RAE", "a tree peer"]
    write_run(tmp_path / "somewhere", {"rae": RAE_P1}, params=False)  # neither params nor a layout to tell by
    with pytest.raises(DataError, match="cannot tell the dataset"):
        results_table.build_tables([tmp_path / "somewhere"], tmp_path / "results")


def test_rae_rows_are_named_by_their_lambda_and_every_one_is_tested(results_table, tmp_path):
    """metrics.json as the evaluate stage writes it since the tune stage: selection and query_lambda
    entries describe the rae rows and are not rows themselves."""
    results = tmp_path / "results"
    folder = results / "runs" / "toy_auto"
    write_run(folder, {"rae": RAE_P1, "rae_query_lambda": RAE_P1, "knn": KNN_P1})
    metrics = json.loads((folder / "metrics.json").read_text())
    metrics["selection"] = {"lambda": 0.7, "tau": 0.04, "auto": {"lambda": True, "tau": False}}
    metrics["query_lambda"] = {"uses_model": 0, "fallback": 0.7}
    (folder / "metrics.json").write_text(json.dumps(metrics))

    rows = results_table.build_tables([folder], results)["toy"]

    names = [row["name"] for row in rows]
    assert names == ["toy_auto: RAE auto λ=0.7", "toy_auto: RAE per-query λ (fell back to λ=0.7)", "toy_auto: kNN"]
    expected = 2 * scipy.stats.t.sf(3 ** 0.5, 3)  # differences 1, 0, 0, 1 against kNN: mean 1/2, sd 1/sqrt(3)
    assert [rows[0]["p"]["P@1"], rows[1]["p"]["P@1"]] == pytest.approx([expected, expected], abs=1e-9)
    assert rows[0]["vs"] == rows[1]["vs"] == "toy_auto: kNN"


def log_evaluate(project, metrics: dict, queries_per_s: float, data_name: str) -> None:
    """What the evaluate stage logs into a pipeline's MLflow run: its metrics.json and, beside them, the timing."""
    (project / "params.yaml").write_text(f"data:\n  name: {data_name}\n")  # another params file: another run
    with stage_run("evaluate") as run:
        run.metrics({**metrics, "retrieval": {**metrics["retrieval"], "queries_per_s": queries_per_s}})


def test_a_new_runs_predict_time_comes_from_the_mlflow_run_that_logged_its_metrics(results_table, tmp_path,
                                                                                     monkeypatch):
    """The evaluate stage logs its search rate to MLflow alone; the run whose metrics are this folder's gives it,
    not a newer run of other metrics."""
    project, results = tmp_path / "project", tmp_path / "results"
    (project / ".dvc").mkdir(parents=True)
    monkeypatch.chdir(project)
    folder = project / "artifacts" / "toy" / "eval"
    write_run(folder, {"rae": RAE_P1, "knn": KNN_P1}, params=False, queries_per_s=None)
    metrics = json.loads((folder / "metrics.json").read_text())
    log_evaluate(project, metrics, 2500.0, "toy")
    other = {**metrics, "rae": {**metrics["rae"], "P@1": 12.5}}
    log_evaluate(project, other, 9999.0, "toy-other")

    rows = results_table.build_tables([folder], results)["toy"]

    rae = next(row for row in rows if row["method"] == "rae")
    assert rae["predict_s_per_1k"] == 0.4  # 1000 queries at 2,500 a second


def test_a_bench_runs_predict_time_comes_from_its_stage_resources_record_and_a_zero_shot_run_has_no_train_time(
        results_table, tmp_path):
    """bench/stage_resources.py copies the figure from MLflow into its record: a run folder made on another
    machine, whose MLflow store is not here, keeps it. Without it anywhere the row says it does not know. A zero-shot
    run's train stage only exported the pre-trained encoder; that time is not training."""
    results = tmp_path / "results"
    write_run(results / "runs" / "toy_recorded", {"rae": RAE_P1}, queries_per_s=None)
    (results / "stage_resources_toy_recorded.json").write_text(json.dumps({"evaluate": {"queries_per_s": 4000.0}}))
    write_run(results / "runs" / "toy_unknown", {"rae": RAE_P1}, queries_per_s=None)
    write_run(results / "runs" / "toy_zero", {"rae": RAE_P1}, mode="zero-shot")
    (results / "stage_resources_toy_zero.json").write_text(json.dumps({"train": {"wall_s": 8.0}}))

    rows = results_table.build_tables([results / "runs" / name for name in ("toy_recorded", "toy_unknown", "toy_zero")],
                                      results)["toy"]

    assert {row["name"]: (row["predict_s_per_1k"], row["train_s"]) for row in rows} == {
        "toy_recorded: RAE λ=0.5": (0.25, None), "toy_unknown: RAE λ=0.5": (None, None),
        "toy_zero: RAE λ=0.5": (0.5, None)}
