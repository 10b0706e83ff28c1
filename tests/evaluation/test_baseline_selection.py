"""kNN tuned as RAE is: with τ auto, the tune stage chooses kNN's τ on the same held-out queries for kNN alone, and
the evaluate path scores kNN at it. A hand-made memory where RAE's best τ and kNN's differ, checked against a dense
brute force of kNN written here."""

from __future__ import annotations

import json
import math
from functools import partial

import numpy as np
import scipy.sparse as sp

import tune_helpers
from raexmc.data.held_out import validation_folds
from raexmc.evaluation.evaluator import Evaluator
from raexmc.evaluation.memory_choice import MemoryTuning
from raexmc.evaluation.methods import evaluate_retrieval
from raexmc.evaluation.retrievals import Retrievals
from raexmc.evaluation.selection import select_knn
from raexmc.evaluation.selection_file import read_selection
from raexmc.evaluation.validation_memory import held_out_folds
from raexmc.memory.input_memory import MemorySettings
from test_validation_folds import random_set
from tests.helpers import dense_top_b_softmax, rae_on
from tune_helpers import TAUS, exact_search, run_stage, save_embeddings, toy_params, tune_settings, write_training_split

DIM = 32
B = 13              # every key of the memory: 9 inputs and 4 labels
FRACTION = 0.18     # round(11 x 0.18) = 2 of the 11 training inputs held out: the two queries
A, B_RIGHT, C, D = range(4)   # the labels


unit = partial(tune_helpers.unit, DIM)


def near(axis: int, sim: float, own: int) -> np.ndarray:
    """A unit vector at cosine `sim` to e_axis, the rest of it along its own axis `own`."""
    return unit((axis, sim), (own, math.sqrt(1 - sim ** 2)))


def two_queries_two_answers():
    """Eleven training inputs, two of them held out (the rows the tune split holds out), and four label keys.

    Query 1 (= e0, label B): one memory input of label A at similarity 0.9, three of label B at 0.8; B's label key at
    0.95. kNN ranks B first only where the three outvote the one, 3 exp(0.8/τ) > exp(0.9/τ), τ > 0.1/ln 3 = 0.091:
    right at 0.1 and above, wrong at 0.02 and 0.04. RAE (λ 0.5) is right at every τ: B's label key is the nearest.
    Query 2 (= e1, label C): five memory inputs of label D at 0.85, C's label key at 0.9. kNN is wrong at every τ
    (no input holds C); RAE is right only where exp(0.9/τ) > 5 exp(0.85/τ), τ < 0.05/ln 5 = 0.031: at 0.02 and below.
    So on validation RAE's best τ is 0.02 (100, as at the halving past it, 0.01, farther from 0.04) and kNN's is 0.1
    (50, as at the doubling past it, 0.2, farther from 0.04; 0 below).
    """
    queries = [unit((0, 1.0)), unit((1, 1.0))]
    memory = [near(0, 0.9, 10), *(near(0, 0.8, 11 + i) for i in range(3)), *(near(1, 0.85, 14 + i) for i in range(5))]
    memory_labels = [A, B_RIGHT, B_RIGHT, B_RIGHT, D, D, D, D, D]
    Z = np.array([unit((22, 1.0)), near(0, 0.95, 20), near(1, 0.9, 21), unit((23, 1.0))], dtype=np.float32)
    rest_rows, val_rows = validation_folds(11, FRACTION, 0, 1)[0]
    X, labels = np.zeros((11, DIM), np.float32), np.zeros(11, np.int64)
    X[val_rows], labels[val_rows] = queries, [B_RIGHT, C]
    X[rest_rows], labels[rest_rows] = memory, memory_labels
    Y = sp.csr_matrix((np.ones(11), (np.arange(11), labels)), shape=(11, 4))
    return X, Z, Y, rest_rows, val_rows


def brute_knn_p_at_1(Q, X_keys, Y_keys, Y_true, tau: float) -> float:
    """P@1 (percent) of kNN from dense similarities: softmax over the top-B inputs at τ, times their labels."""
    scores = dense_top_b_softmax(Q @ X_keys.T, B, tau) @ Y_keys.toarray()
    return round(100 * float(np.mean(Y_true.toarray()[np.arange(len(Q)), scores.argmax(axis=1)] > 0)), 2)


def test_knn_gets_its_own_tau_in_the_tune_output_and_is_scored_at_it(tmp_path):
    X, Z, Y, rest_rows, val_rows = two_queries_two_answers()
    write_training_split(tmp_path, X, Z, Y)
    params = toy_params(tmp_path, **{"tau": "auto", "tau_grid": TAUS, "val_fraction": FRACTION, "b": B})
    proc = run_stage(tmp_path, params)
    assert proc.returncode == 0, proc.stderr
    selection = json.loads((tmp_path / "tune" / "selection.json").read_text())

    Q, X_rest, Y_rest, Y_val = X[val_rows], X[rest_rows], Y[rest_rows], Y[val_rows]
    assert (selection["lambda"], selection["tau"]) == (0.5, 0.02), "RAE's τ: the hand-worked one"
    knn = selection["baselines"]["knn"]
    assert knn["tau"] == 0.1 and knn["auto"] == {"tau": True} and knn["val_value"] == 50.0
    curve = {row["tau"]: row["P@1"] for row in knn["validation"]}
    # the same grid as RAE's, widened past its top edge once: 0.2 ties with 0.1, which is then no longer an edge
    assert sorted(curve) == [0.02, 0.04, 0.1, 0.2]
    assert curve == {tau: brute_knn_p_at_1(Q, X_rest, Y_rest, Y_val, tau) for tau in curve}
    best = min(curve, key=lambda tau: (-curve[tau], abs(math.log(tau / 0.04))))   # RAE's tie rule
    assert knn["tau"] == best and knn["fixed_val_value"] == curve[0.04] == 0.0

    # the evaluate path, on these queries against this memory: kNN at its own τ, RAE at its own
    chosen = read_selection(tmp_path / "tune")
    found = Retrievals(joint=exact_search(Q, np.vstack([X_rest, Z]), B), labels=exact_search(Q, Z, B),
                       inputs=exact_search(Q, X_rest, B))
    evaluator = Evaluator(Y_rest, Y_val, sp.csr_matrix(Y_val.shape), (0.55, 1.5))
    methods = evaluate_retrieval(found.rows, evaluator, rae_on(evaluator, chosen.lam, chosen.tau, B),
                                 knn_tau=chosen.knn_tau)["methods"]
    assert methods["knn"]["P@1"] == brute_knn_p_at_1(Q, X_rest, Y_rest, Y_val, 0.1) == 50.0
    assert brute_knn_p_at_1(Q, X_rest, Y_rest, Y_val, chosen.tau) == 0.0, "at RAE's τ kNN would score 0"
    assert methods["rae"]["P@1"] == 100.0


def test_a_fixed_tau_is_knn_s_too(tmp_path):
    X, Z, Y, _, _ = two_queries_two_answers()
    write_training_split(tmp_path, X, Z, Y)
    proc = run_stage(tmp_path, toy_params(tmp_path, **{"lambda": "auto", "tau": 0.04, "val_fraction": FRACTION,
                                                         "b": B}))
    assert proc.returncode == 0, proc.stderr
    selection = read_selection(tmp_path / "tune")
    assert selection.baselines.knn.model_dump(exclude_none=True) == {"tau": 0.04, "auto": {"tau": False}}
    assert selection.knn_tau == selection.tau == 0.04


def test_knn_searches_every_remaining_input_whatever_rae_s_memory_keeps(tmp_path):
    """memory.keep 0.5: RAE's validation memory keeps some of the 9 remaining inputs, kNN's curve is still the
    brute force's over all of them."""
    X, Z, Y, rest_rows, val_rows = two_queries_two_answers()
    write_training_split(tmp_path, X, Z, Y)
    params = toy_params(tmp_path, **{"tau": "auto", "tau_grid": TAUS, "val_fraction": FRACTION, "b": B,
                                     "memory.keep": 0.5, "memory.method": "random", "memory.seed": 7})
    proc = run_stage(tmp_path, params)
    assert proc.returncode == 0, proc.stderr
    selection = json.loads((tmp_path / "tune" / "selection.json").read_text())
    assert selection["memory_input_keys"] < len(rest_rows)
    curve = {row["tau"]: row["P@1"] for row in selection["baselines"]["knn"]["validation"]}
    assert curve == {tau: brute_knn_p_at_1(X[val_rows], X[rest_rows], Y[rest_rows], Y[val_rows], tau) for tau in curve}
    assert selection["baselines"]["knn"]["tau"] == 0.1


def test_knn_curve_pools_every_fold_against_its_own_full_memory(tmp_path):
    """Four folds of 10 of 40 random inputs (val_folds 4): kNN's curve is the brute force's over all 40 queries,
    each fold's against the 30 others, all of them (kNN's own b, 200), whatever RAE's b (8)."""
    X, Z, Y = random_set()
    settings = tune_settings(lam=0.5, lambda_grid=(0.5,), b=8, val_fraction=0.25, val_folds=4)
    folds = held_out_folds(Y, sp.csr_matrix(Y.shape), settings)
    tuning = MemoryTuning(save_embeddings(tmp_path / "emb", X, Z), folds, settings, (0.55, 1.5),
                          lambda keep, weight: MemorySettings(keep, "random", False, 0), "exact")
    knn = select_knn(tuning.full_memory, settings, (0.55, 1.5))

    def pooled_p_at_1(tau: float) -> float:
        right = []
        for rest, val in validation_folds(len(X), 0.25, 0, 4):
            scores = dense_top_b_softmax(X[val] @ X[rest].T, len(rest), tau) @ Y[rest].toarray()
            right.extend(Y[val].toarray()[np.arange(len(val)), scores.argmax(axis=1)] > 0)
        return round(100 * float(np.mean(right)), 2)

    curve = {row["tau"]: row["P@1"] for row in knn.validation}
    assert set(TAUS) <= set(curve) and curve == {tau: pooled_p_at_1(tau) for tau in curve}
    assert knn.tau == min(curve, key=lambda tau: (-curve[tau], abs(math.log(tau / 0.04))))
