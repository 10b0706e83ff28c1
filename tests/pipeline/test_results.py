"""`raexmc results`: the key metrics and tests of a run as a short table, read from hand-made outputs."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import REPO

ROW = {"P@1": 52.21, "P@5": 24.13, "nDCG@5": 40.5, "PSP@5": 30.0, "R@100": 79.8, "macro-F1@5": {"tail": 21.17}}


def write_run(folder, p_value, log10_p, knn_tau=0.04, tau_auto=False):
    (folder / "eval").mkdir(parents=True)
    metrics = {"rae": ROW, "dual_encoder": {**ROW, "P@1": 36.75}, "knn": {**ROW, "P@1": 45.84, "tau": knn_tau},
               "selection": {"auto": {"lambda": True, "tau": tau_auto}, "lambda": 0.5, "tau": 0.04, "metric": "P@1"},
               "retrieval": {"depth": 200}}
    (folder / "eval" / "metrics.json").write_text(json.dumps(metrics))
    test = {"mean_diff": 15.46, "p_value": p_value, "log10_p": log10_p}
    (folder / "significance.json").write_text(json.dumps({"rae_vs_dual_encoder": {"P@1": test}}))


def results(tmp_path):
    return subprocess.run([sys.executable, "-m", "raexmc.cli", "results", "--name", "run",
                           "--artifacts", str(tmp_path)], cwd=REPO, capture_output=True, text=True)


def test_table_rows_and_tests(tmp_path):
    write_run(tmp_path / "run", 3.95e-16, -15.4)
    proc = results(tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "λ = 0.5, τ = 0.04 (lambda chosen on validation P@1)"
    assert lines[1].split() == ["method", "P@1", "P@5", "nDCG@5", "PSP@5", "R@100", "F1@5", "tail"]
    assert lines[2].split() == ["rae", "52.21", "24.13", "40.50", "30.00", "79.80", "21.17"]
    assert lines[3].split()[:2] == ["dual_encoder", "36.75"] and lines[4].split()[:2] == ["knn", "45.84"]
    assert lines[5] == "rae vs dual_encoder: P@1 +15.46 (p 4.0e-16)"
    assert max(len(line) for line in lines) <= 100


def test_knn_s_own_tau_is_named_where_it_differs_from_rae_s(tmp_path):
    write_run(tmp_path / "run", 3.95e-16, -15.4, knn_tau=0.1, tau_auto=True)
    lines = results(tmp_path).stdout.splitlines()
    assert lines[0] == "λ = 0.5, τ = 0.04 (lambda and tau chosen on validation P@1); kNN τ = 0.1"


def test_an_underflowed_p_is_shown_by_its_log10_not_as_zero(tmp_path):
    write_run(tmp_path / "run", 0.0, -616.4)
    # 10^-616.4 = 10^0.6 * 10^-617
    assert results(tmp_path).stdout.splitlines()[-1] == "rae vs dual_encoder: P@1 +15.46 (p 4.0e-617)"


def test_missing_outputs_are_one_line(tmp_path):
    proc = results(tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"DataError: {tmp_path}/run/eval/metrics.json: not found: run `dvc repro` (or the evaluate and significance "
        "stages) first"]


def test_metrics_without_any_method_are_one_line(tmp_path):
    (tmp_path / "run" / "eval").mkdir(parents=True)
    (tmp_path / "run" / "eval" / "metrics.json").write_text(json.dumps({"retrieval": {"depth": 200}}))
    (tmp_path / "run" / "significance.json").write_text("{}")
    proc = results(tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"DataError: {tmp_path}/run/eval/metrics.json: holds none of the methods rae, rae_query_lambda, "
        "dual_encoder, knn"]
