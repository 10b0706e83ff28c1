"""bench/defaults_choice.py runs the tune to significance stages per configuration on a made-up project: the paper's
configuration scores RAE and kNN as a brute force over every key does, and the record's t-tests pair the
configurations' own test values."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from tests.helpers import REPO, dense_top_b_softmax, small_project

pytestmark = pytest.mark.slow   # eight stage processes and an index build


def p_at_1(scores: np.ndarray, Y: np.ndarray) -> float:
    """P@1 in percent, rounded as the record rounds it: whether each query's top label is one of its own."""
    return round(100 * float(Y[np.arange(len(Y)), scores.argmax(axis=1)].mean()), 2)


def test_the_papers_configuration_is_the_brute_force_and_the_next_one_is_tested_against_it(tmp_path):
    data, embeddings = small_project(tmp_path)
    index = subprocess.run([sys.executable, str(REPO / "stages/index.py"), "--embeddings", str(embeddings),
                            "--out", str(tmp_path / "artifacts/tiny/index"), "--params", str(tmp_path / "params.yaml")],
                           cwd=tmp_path, capture_output=True, text=True)
    assert index.returncode == 0, index.stderr[-3000:]
    proc = subprocess.run([sys.executable, str(REPO / "bench/defaults_choice.py"), "--root", str(tmp_path), "--name",
                           "tiny", "--configs", "paper,lambda-tau"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    entry = json.loads((tmp_path / "bench/results/defaults_choice.json").read_text())["datasets"]["tiny"]
    paper, auto = entry["configs"]["paper"], entry["configs"]["lambda-tau"]

    X, Z, Q = (np.load(embeddings / f"{split}.npy") for split in ("train", "labels", "test"))
    Y_train, Y_test = (sp.load_npz(data / f"Y_{split}.npz").toarray() > 0 for split in ("train", "test"))
    # b = 200 takes every one of the 100 keys: RAE is λ 0.5 over [Y; I] at τ 0.04, kNN the same over the inputs alone
    rae = dense_top_b_softmax(Q @ np.vstack([X, Z]).T, 200, 0.04) @ np.vstack([0.5 * Y_train, 0.5 * np.eye(len(Z))])
    knn = dense_top_b_softmax(Q @ X.T, 200, 0.04) @ Y_train
    assert paper["chosen"]["lambda"] == 0.5 and paper["chosen"]["tau"] == paper["chosen"]["knn_tau"] == 0.04
    assert (paper["test"]["rae"]["P@1"], paper["test"]["knn"]["P@1"]) == (p_at_1(rae, Y_test), p_at_1(knn, Y_test))

    assert auto["chosen"]["tau"] in {0.01, 0.02, 0.04, 0.07, 0.1} | {0.005, 0.0025, 0.00125, 0.2, 0.4, 0.8}
    gain = auto["t_tests"]["rae_vs_paper"]
    assert gain["config"] == "paper" and auto["t_tests"]["rae_vs_previous_config"] == gain
    assert abs(gain["P@1"]["diff"] - (auto["test"]["rae"]["P@1"] - paper["test"]["rae"]["P@1"])) <= 0.011
    for config in (paper, auto):
        assert set(config["stages"]) == {"tune", "memory", "evaluate", "significance"}
        assert config["tune_evaluate_cpu_s"] > 0 and "rae_vs_knn_own_tau" in config["t_tests"]
