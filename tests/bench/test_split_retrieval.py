"""bench/split_retrieval.py on a small made-up project: the few-labels subset it measures, and the share of
label keys in the joint top-b against a brute force over the dense similarities."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import scipy.sparse as sp

from conftest import REPO

N_TRAIN, N_TEST, N_LABELS, B = 80, 12, 20, 10


def small_project(root):
    rng = np.random.default_rng(0)
    data, embeddings = root / "data" / "tiny", root / "artifacts" / "tiny" / "embeddings"
    for folder in (data, embeddings, root / "bench" / "results"):
        folder.mkdir(parents=True)
    (data / "stats.json").write_text(json.dumps({"N_train": N_TRAIN, "N_test": N_TEST, "L": N_LABELS}))
    for split, n in (("train", N_TRAIN), ("test", N_TEST)):
        labels = (rng.random((n, N_LABELS)) < 0.1) | (np.arange(N_LABELS) == rng.integers(0, N_LABELS, (n, 1)))
        sp.save_npz(data / f"Y_{split}.npz", sp.csr_matrix(labels.astype(np.float64)))
        sp.save_npz(data / f"filter_{split}.npz", sp.csr_matrix((n, N_LABELS), dtype=bool))
    for split, n in (("train", N_TRAIN), ("labels", N_LABELS), ("test", N_TEST)):
        v = rng.normal(size=(n, 8)).astype(np.float32)
        np.save(embeddings / f"{split}.npy", v / np.linalg.norm(v, axis=1, keepdims=True))
    (embeddings / "meta.json").write_text(json.dumps({"encoder": "made-up"}))
    shutil.copyfile(REPO / "params.yaml", root / "params.yaml")
    return data, embeddings


def test_few_labels_and_the_joint_label_share_by_brute_force(tmp_path):
    data, embeddings = small_project(tmp_path)
    proc = subprocess.run([sys.executable, str(REPO / "bench/split_retrieval.py"), "--root", str(tmp_path), "--name",
                           "tiny", "--b", str(B), "--top-labels", "5", "--shares", "0.5"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "bench/results/split_retrieval_tiny_top5.json").read_text())

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
    assert set(report["test"]["rae"]) == {"joint", "split 0.5"}
    assert report["tuned_on_validation"]["split"]["label_share"] is not None
