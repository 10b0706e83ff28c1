"""bench/split_retrieval.py on a small made-up project: the few-labels subset it measures, the share of
label keys in the joint top-b against a brute force over the dense similarities, the comparison's paired tests,
the record named by --tag, and the label keys' own temperature on a hand-worked example."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import scipy.sparse as sp

from tests.helpers import REPO, load_module, small_project

B = 10


def test_few_labels_and_the_joint_label_share_by_brute_force(tmp_path):
    data, embeddings = small_project(tmp_path)
    (tmp_path / "bench/results").rmdir()  # a root without the folder: the script makes it
    proc = subprocess.run([sys.executable, str(REPO / "bench/split_retrieval.py"), "--root", str(tmp_path), "--name",
                           "tiny", "--b", str(B), "--top-labels", "5", "--shares", "0.5",
                           "--label-tau-ratios", "0.5,1", "--tag", "fine-tuned"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [p.name for p in (tmp_path / "bench/results").iterdir()] == ["split_retrieval_tiny_top5_fine-tuned.json"]
    report = json.loads((tmp_path / "bench/results/split_retrieval_tiny_top5_fine-tuned.json").read_text())

    Y_train, Y_test = (sp.load_npz(data / f"Y_{split}.npz").toarray() > 0 for split in ("train", "test"))
    top = np.sort(np.argsort(-Y_train.sum(axis=0), kind="stable")[:5])
    X = np.load(embeddings / "train.npy")[Y_train[:, top].any(axis=1)]
    queries = np.load(embeddings / "test.npy")[Y_test[:, top].any(axis=1)]
    Z = np.load(embeddings / "labels.npy")[top]
    assert (report["train_inputs"], report["labels"], report["test_queries"]) == (len(X), 5, len(queries))

    sims = queries @ np.vstack([X, Z]).T
    label_keys = (np.argsort(-sims, axis=1)[:, :B] >= len(X)).sum(axis=1)
    assert report["joint_top_b"] == {"label_key_share_percent": round(100 * label_keys.mean() / B, 2),
                                     "queries_without_label_key_percent": round(100 * (label_keys == 0).mean(), 2)}
    profile = report["mean_similarity_at_rank"]
    top_inputs = -np.sort(-(queries @ X.T).astype(np.float64), axis=1)
    assert abs(profile["input_keys"]["10"] - top_inputs[:, 9].mean()) < 1e-4
    assert abs(profile["label_keys"]["1"] - (queries @ Z.T).max(axis=1).mean(dtype=np.float64)) < 1e-4
    assert set(profile["label_keys"]) == {"1"}  # 5 labels: no 10th label key
    assert set(report["test"]["rae"]) == {"joint", "split 0.5"}
    assert report["tuned_on_validation"]["split"]["label_share"] is not None

    comparison = report["comparison"]
    assert comparison["test"]["split (auto)"] == report["tuned_on_validation"]["split"]["test"]
    assert comparison["test"]["joint"] == report["tuned_on_validation"]["joint"]["test"]
    assert set(comparison["paired_t_tests"]) == {"split_vs_joint", "split_vs_knn", "split_vs_dual_encoder",
                                                  "joint_vs_knn", "joint_vs_dual_encoder"}
    pairs = [("split (auto)", other) for other in ("joint", "knn", "dual_encoder")]
    for method, other in pairs + [("joint", "knn"), ("joint", "dual_encoder")]:
        for metric in ("P@1", "P@5", "PSP@5", "R@100"):
            test = comparison["paired_t_tests"][f"{method.split()[0]}_vs_{other}"][metric]
            # the mean of the per-query differences is the difference of the reported means (each rounded)
            ours = comparison["test"][method][metric]
            assert abs(test["diff"] - (ours - comparison["test"][other][metric])) <= 0.015
            assert test["ci95"][0] <= test["diff"] <= test["ci95"][1]
            assert 0.0 <= float(test["p"]) <= 1.0
    probe = comparison["label_temperature_probe"]
    tau = report["tuned_on_validation"]["split"]["tau"]
    assert probe["tau"] == tau and {row["label_tau"] for row in probe["curve"]} == {tau / 2, tau}
    assert len(probe["curve"]) == 2 * len({row["lambda"] for row in probe["curve"]})
    assert set(probe["test"]) == {"P@1", "P@5", "PSP@5", "R@100"}


def test_a_tag_that_is_no_file_name_part_is_refused_before_any_work(tmp_path):
    small_project(tmp_path)
    proc = subprocess.run([sys.executable, str(REPO / "bench/split_retrieval.py"), "--root", str(tmp_path), "--name",
                           "tiny", "--tag", "fine tuned"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 2 and "--tag" in proc.stderr
    assert not list((tmp_path / "bench/results").iterdir())


def test_label_keys_at_their_own_temperature_by_hand():
    bench = load_module(REPO / "bench/split_retrieval.py")
    ids = np.array([[0, 3, 1, -1]])
    sims = np.array([[0.5, 0.4, 0.3, -np.inf]], dtype=np.float32)
    # 2 input keys (ids 0, 1) and label keys from id 2: the label key's 0.4 at tau_z = 0.02 reads as 0.8 at tau 0.04
    new_ids, new_sims = bench.label_temperature((ids, sims), 2, 0.04, 0.02)
    assert (new_ids == ids).all()
    np.testing.assert_allclose(new_sims, [[0.5, 0.8, 0.3, -np.inf]], rtol=0, atol=1e-6)
