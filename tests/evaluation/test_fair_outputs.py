"""What the evaluate stage's outputs promise other tools and other settings, through the real tune and evaluate
stages on a small dataset whose label texts repeat (as FOLDOC's do, so that the dual encoder's scores tie exactly):

- PECOS's own evaluator, sorting each score file by descending score with its own tie rule, gives metrics.json's
  P@1..5 to every digit;
- no RAE b moves a baseline: the dual encoder's and kNN's rows are the same at infer.b 50, 100 and 200, and the dual
  encoder ranks 100 labels after its filtered pairs, whatever b."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from raexmc.data.dataset import Example, Text, write_dataset
from raexmc.memory.indexes import build_memory_indexes
from raexmc.memory.input_memory import MemorySettings, build_input_memory
from raexmc.memory.keys_values import training_values
from tests.helpers import made_up_predictor, write_params
from tune_helpers import stage_ok

N_TRAIN, N_LABELS, N_TEST, DIM = 300, 240, 40, 8
REPEATED = 60          # labels 0..59 share their text (and so their key) with labels 60..119
B_VALUES = (50, 100, 200)


def build_small_project(root):
    """Labels with repeated texts, random training and test inputs near some labels, two filtered pairs a test row."""
    rng = np.random.default_rng(11)
    labels = rng.normal(size=(N_LABELS, DIM))
    labels[REPEATED:2 * REPEATED] = labels[:REPEATED]
    train_labels = [rng.choice(N_LABELS, size=rng.integers(1, 4), replace=False) for _ in range(N_TRAIN)]
    test_labels = [rng.choice(N_LABELS, size=rng.integers(1, 5), replace=False) for _ in range(N_TEST)]
    filtered = sorted({(i, int(label)) for i in range(N_TEST) for label in rng.choice(N_LABELS, 2, replace=False)})
    write_dataset(root / "data" / "tiny", [Text(f"l{j}", f"label {j % REPEATED if j < 2 * REPEATED else j}")
                                           for j in range(N_LABELS)],
                  [Example(i, f"train {i}", labels=[int(x) for x in y]) for i, y in enumerate(train_labels)],
                  [Example(i, f"test {i}", labels=[int(x) for x in y]) for i, y in enumerate(test_labels)],
                  {"test": filtered}, {"source": "test"})

    def near_labels(rows):
        return np.stack([labels[row].mean(axis=0) for row in rows]) + 0.7 * rng.normal(size=(len(rows), DIM))

    embeddings = root / "emb"
    embeddings.mkdir()
    for split, keys in (("train", near_labels(train_labels)), ("labels", labels), ("test", near_labels(test_labels))):
        np.save(embeddings / f"{split}.npy", (keys / np.linalg.norm(keys, axis=1, keepdims=True)).astype(np.float32))
    build_memory_indexes(embeddings, root / "index", "exact", progress=False)
    Y_train = training_values(sp.load_npz(root / "data" / "tiny" / "Y_train.npz"))
    build_input_memory(np.load(embeddings / "train.npy"), Y_train, MemorySettings(1.0, "kmeans", False, 0),
                       root / "memory", "exact")


def run_at(root, b: int):
    """tune and evaluate at infer.b = b (with score files), into root/b<b>; returns metrics.json."""
    params = write_params(root, **{"infer.b": b, "infer.val_fraction": 0.2, "infer.val_folds": 1,
                                   "index.backend": "exact"})
    out = root / f"b{b}"
    stage_ok(root, params, "tune", "data/tiny", embeddings=root / "emb", out=out / "tune")
    predictor = made_up_predictor(out / "predictor", root / "data" / "tiny", root / "emb", root / "index",
                                  root / "memory", out / "tune", params)
    stage_ok(root, params, "evaluate", "data/tiny", embeddings=root / "emb", index=root / "index", tune=out / "tune",
             predictor=predictor, out=out / "eval", scores=out / "scores")
    return json.loads((out / "eval" / "metrics.json").read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("fair")
    build_small_project(root)
    return root, {b: run_at(root, b) for b in B_VALUES}


@pytest.mark.slow  # six stage processes: CI's second step
def test_pecos_ranks_the_stage_score_files_as_the_stage_did(runs):
    from pecos.utils import smat_util

    root, metrics = runs
    truth = sp.load_npz(root / "data" / "tiny" / "Y_test.npz").tocsr()
    scores = sp.load_npz(root / "b200" / "scores" / "dual_encoder.npz").tocsr()
    tied = [row for row in range(N_TEST) if len(set(scores[row].data)) < scores[row].nnz]
    assert not tied, "a written row holds exact ties"
    assert sum(len(set(np.round(scores[row].data, 5))) < scores[row].nnz for row in range(N_TEST)) > N_TEST // 2, \
        "the repeated label texts tie the dual encoder's scores before the file breaks them"
    for method in ("rae", "dual_encoder", "knn"):
        pecos = smat_util.Metrics.generate(truth, sp.load_npz(root / "b200" / "scores" / f"{method}.npz"), topk=5)
        for k in range(1, 6):
            if f"P@{k}" in metrics[200][method]:
                assert round(100 * float(pecos.prec[k - 1]), 2) == metrics[200][method][f"P@{k}"], (method, k)


@pytest.mark.slow
def test_no_rae_b_moves_a_baseline(runs):
    root, metrics = runs
    for method in ("dual_encoder", "knn"):
        assert metrics[50][method] == metrics[100][method] == metrics[200][method], method
    assert {metrics[b]["retrieval"]["baseline_depth"] for b in B_VALUES} == {200}
    assert metrics[50]["rae"] != metrics[200]["rae"], "RAE's own b does change RAE"
    ranked = sp.load_npz(root / "b50" / "scores" / "dual_encoder.npz")
    assert np.diff(ranked.indptr).min() == 100, "the dual encoder ranks 100 labels after its 2 filtered pairs"
