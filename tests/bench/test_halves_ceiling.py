"""bench/halves_ceiling.py: the two-softmax mixture against a dense numpy softmax, the learned label keys on a toy
whose label texts point away from their inputs, and a run on a small made-up project whose oracle is checked by
brute force."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import scipy.sparse as sp

from bench_scripts import load_bench_module, small_project
from conftest import REPO

bench = load_bench_module("halves_ceiling.py")


def unit(a):
    return a / np.linalg.norm(a, axis=1, keepdims=True)


def softmax(logits):
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_the_mixture_is_two_softmaxes_each_over_its_own_keys():
    rng = np.random.default_rng(1)
    queries, inputs, labels = (unit(rng.normal(size=(n, 6))) for n in (5, 9, 4))
    Y = sp.csr_matrix((rng.random((9, 4)) < 0.4).astype(np.float64))
    b = 12  # deeper than either key set: every key counts
    hits = [(np.argsort(-(queries @ keys.T), axis=1), -np.sort(-(queries @ keys.T), axis=1).astype(np.float32))
            for keys in (inputs, labels)]
    scores = bench.mixture_scorer(hits[0], hits[1], Y, 0.3, 0.05, 0.2, b)(slice(0, 5)).toarray()
    expected = 0.3 * softmax(queries @ inputs.T / 0.05) @ Y.toarray() + 0.7 * softmax(queries @ labels.T / 0.2)
    np.testing.assert_allclose(scores, expected, atol=1e-6)


def test_learned_label_keys_move_to_their_inputs():
    # two labels whose texts point at the other label's inputs: the text keys classify every input wrongly
    rng = np.random.default_rng(2)
    centres = np.eye(4)[:2]
    inputs = unit(np.repeat(centres, 50, axis=0) + 0.1 * rng.normal(size=(100, 4))).astype(np.float32)
    values = sp.csr_matrix(np.repeat(np.eye(2), 50, axis=0))
    texts = unit(centres[::-1] + 0.2 * np.eye(4)[2:]).astype(np.float32)
    truth = np.repeat([0, 1], 50)
    assert ((inputs @ texts.T).argmax(axis=1) == truth).mean() == 0.0
    learned = bench.learned_label_keys(inputs, values, texts, epochs=200)  # one step per epoch: 100 inputs
    np.testing.assert_allclose(np.linalg.norm(learned, axis=1), 1.0, rtol=0, atol=1e-5)
    assert ((inputs @ learned.T).argmax(axis=1) == truth).mean() == 1.0


def test_a_run_records_every_variant_and_an_oracle_by_brute_force(tmp_path):
    data, embeddings = small_project(tmp_path, n_train=120, n_test=30, n_labels=12)
    proc = subprocess.run([sys.executable, str(REPO / "bench/halves_ceiling.py"), "--root", str(tmp_path), "--name",
                           "tiny", "--b", "10", "--alphas", "0,1", "--epochs", "2", "--tag", "toy"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "bench/results/halves_ceiling_tiny_toy.json").read_text())
    assert set(report["test"]) == {"knn", "dual_encoder", "split, label keys text", "split, label keys prototypes 1",
                                   "mixture, label keys text", "split, label keys learned",
                                   "mixture, label keys learned", "learned label keys alone"}
    assert set(report["paired_t_tests_vs_knn"]) == set(report["test"]) - {"knn", "dual_encoder",
                                                                          "learned label keys alone"}

    # the oracle: per test query the better P@1 of kNN (its own top-b at the chosen τ) and the dual encoder
    X, Z, queries = (np.load(embeddings / f"{split}.npy").astype(np.float64) for split in ("train", "labels", "test"))
    Y_train, Y_test = (sp.load_npz(data / f"Y_{split}.npz").toarray() > 0 for split in ("train", "test"))
    tau, b = report["chosen_on_validation"]["knn"]["tau"], 10
    sims = queries @ X.T
    top = np.argsort(-sims, axis=1)[:, :b]
    weights = softmax(np.take_along_axis(sims, top, axis=1) / tau)
    knn = np.einsum("qk,qkl->ql", weights, Y_train[top].astype(np.float64))
    knn_right = Y_test[np.arange(len(queries)), knn.argmax(axis=1)]
    dual_right = Y_test[np.arange(len(queries)), (queries @ Z.T).argmax(axis=1)]
    assert report["oracle"]["P@1"] == round(100 * (knn_right | dual_right).mean(), 2)
    assert report["oracle"]["dual_encoder_right_knn_wrong_percent"] == round(100 * (dual_right & ~knn_right).mean(), 2)
    assert report["test"]["knn"]["P@1"] == round(100 * knn_right.mean(), 2)
