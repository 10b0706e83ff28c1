"""The per-query λ model in the pipeline: the tune stage fits it on its own validation retrieval
(checked against a fit by hand on a dense brute-force retrieval), evaluate's `rae_query_lambda`
(checked against a dense per-query loop), and significance tests it against RAE."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

import oracle
from raexmc.data.held_out import split_validation
from raexmc.errors import DataError
from raexmc.evaluation.evaluator import Evaluator
from raexmc.evaluation.methods import QUERY_LAMBDA_METHOD, evaluate_retrieval
from raexmc.evaluation.propensity import DEFAULT_AB
from raexmc.evaluation.retrievals import Retrievals
from raexmc.evaluation.significance import compare_runs
from raexmc.rae.model import RaeModel, RaeSettings
from raexmc.rae.query_lambda import QueryLambda, fit_query_lambda, query_features, read_query_lambda
from tests.helpers import dense_top_b_softmax, write_params
from tune_helpers import run_stage, write_training_split

N_TRAIN, N_LABELS, FRACTION, B, TAU = 60, 10, 0.5, 10, 0.04
GRID = [0.0, 0.5, 1.0]


def two_kinds_of_inputs():
    """(X, Z, Y) of 60 training inputs with one label each; the 30 the tune stage holds out come in two kinds.

    Memory input j (axis j) holds label j % 10; label l's key is axis 30 + l. A held-out input with
    right label r and wrong label w: kind 1 sits at 0.6 from a memory input of r and 0.7 from w's key
    (only λ = 1 ranks r first); kind 0 at 0.7 from a memory input of w and 0.6 from r's key (only
    λ = 0 does). Every fixed λ gets one kind wrong; which key is nearest tells the kinds apart.
    """
    rest_rows, val_rows = split_validation(sp.csr_matrix((N_TRAIN, 1)), FRACTION, 0)  # it reads the count only
    dim = len(rest_rows) + N_LABELS + len(val_rows)
    X, Z = np.zeros((N_TRAIN, dim)), np.eye(N_LABELS, dim, len(rest_rows))
    labels = np.empty(N_TRAIN, dtype=np.int64)
    for j, row in enumerate(rest_rows):
        X[row, j], labels[row] = 1.0, j % N_LABELS
    rng = np.random.default_rng(0)
    for i, row in enumerate(val_rows):
        right, wrong = rng.choice(N_LABELS, 2, replace=False)
        near_input, near_label = (right, wrong) if i % 2 else (wrong, right)
        input_sim, label_sim = (0.6, 0.7) if i % 2 else (0.7, 0.6)
        X[row, near_input] = input_sim  # memory input `near_input` (j < 10) holds label near_input
        X[row, len(rest_rows) + near_label] = label_sim
        X[row, len(rest_rows) + N_LABELS + i] = np.sqrt(1 - input_sim ** 2 - label_sim ** 2)
        labels[row] = right
    Y = sp.csr_matrix((np.ones(N_TRAIN), (np.arange(N_TRAIN), labels)), shape=(N_TRAIN, N_LABELS))
    return X.astype(np.float32), Z.astype(np.float32), Y, rest_rows, val_rows


def tune(tmp_path, X, Z, Y):
    """The tune stage on the toy's training split: λ auto on GRID at τ TAU, one set held out."""
    write_training_split(tmp_path, X, Z, Y)
    params = write_params(tmp_path, **{"infer.lambda": "auto", "infer.tau": TAU, "infer.lambda_sweep": GRID,
                                       "infer.b": B, "infer.val_fraction": FRACTION, "infer.val_folds": 1})
    proc = run_stage(tmp_path, params)
    assert proc.returncode == 0, proc.stderr


def test_tune_stage_writes_the_model_a_fit_by_hand_gives(tmp_path):
    X, Z, Y, rest_rows, val_rows = two_kinds_of_inputs()
    tune(tmp_path, X, Z, Y)
    written = json.loads((tmp_path / "tune" / "query_lambda.json").read_text())
    model = QueryLambda.from_json(written)

    # By hand: the held-out inputs' dense top-b over [X_rest; Z], P@1 of every grid λ, the library's ridge fit.
    keys = np.vstack([X[rest_rows], Z])
    S = X[val_rows].astype(np.float64) @ keys.T.astype(np.float64)
    ids = np.argsort(-S, axis=1, kind="stable")[:, :B]
    sims = np.take_along_axis(S, ids, axis=1).astype(np.float32)
    P, Y_rest, truth = dense_top_b_softmax(S, B, TAU), Y[rest_rows].toarray(), Y[val_rows].toarray()
    n_rest = len(rest_rows)
    targets = np.column_stack([
        truth[np.arange(len(val_rows)), (lam * P[:, :n_rest] @ Y_rest + (1 - lam) * P[:, n_rest:]).argmax(axis=1)]
        for lam in GRID])
    assert targets.mean(axis=0).max() == 0.5, "every fixed λ gets one kind of held-out input wrong"
    chosen = json.loads((tmp_path / "tune" / "selection.json").read_text())["lambda"]  # a tie: the fit's bar is it
    by_hand, report = fit_query_lambda(query_features(ids, sims, Y[rest_rows], TAU, B), targets, np.array(GRID), TAU, B,
                                       fixed_lambda=chosen)

    assert by_hand.uses_model and model.uses_model and written["fit"]["uses_model"]
    assert (model.tau, model.b, model.fallback) == (TAU, B, by_hand.fallback)
    np.testing.assert_array_equal(model.grid, GRID)
    for name in ("mean", "scale", "coef"):
        np.testing.assert_allclose(getattr(model, name), getattr(by_hand, name), rtol=1e-6, atol=1e-9)
    assert written["fit"]["cv_gain"] == pytest.approx(report["cv_gain"], abs=1e-9)
    assert report["cv_gain"] == pytest.approx(0.5, abs=1e-9)
    assert written["fit"]["queries"] == len(val_rows) == 30


def test_tune_stage_with_too_few_held_out_inputs_writes_the_chosen_lambda(tmp_path):
    X, Z, Y, _, _ = two_kinds_of_inputs()
    tune(tmp_path, X[:12], Z, Y[:12])  # 6 held out: too few for 5 folds
    selection = json.loads((tmp_path / "tune" / "selection.json").read_text())
    model = read_query_lambda(tmp_path / "tune" / "query_lambda.json", selection["tau"], B)
    assert not model.uses_model and model.fallback == selection["lambda"]
    assert "fewer than 10" in json.loads((tmp_path / "tune" / "query_lambda.json").read_text())["fit"]["reason"]


def test_rae_query_lambda_equals_a_dense_per_query_loop():
    """Two kinds of queries, λ = 0 and λ = 1 by a hand-set model on sim_gap; the retrieval is deeper
    than b (evaluate searches max(b, b_sweep)), so only its first b keys may count."""
    n_train, n_labels, b, tau = 20, 10, 3, 0.1
    Y_train = sp.csr_matrix((np.ones(n_train), (np.arange(n_train), np.arange(n_train) % n_labels)),
                            shape=(n_train, n_labels))
    rng = np.random.default_rng(3)
    n = 40
    kind = np.arange(n) % 2
    right, shift = rng.integers(0, n_labels, n), rng.integers(1, n_labels, n)
    wrong, third = (right + shift) % n_labels, (right + shift + 1) % n_labels  # third: past b, never scored
    ids = np.where(kind[:, None] == 1,
                   np.column_stack([n_train + wrong, right, right + n_labels, n_train + third]),
                   np.column_stack([wrong, wrong + n_labels, n_train + right, n_train + third]))
    sims = np.where(kind[:, None] == 1, [1.0, 0.8, 0.8, 0.79], [1.0, 1.0, 0.8, 0.79]) + rng.uniform(-0.01, 0.01, (n, 4))
    sims = np.sort(sims, axis=1)[:, ::-1].astype(np.float32)
    Y_test = sp.csr_matrix((np.ones(n), (np.arange(n), right)), shape=(n, n_labels))
    exclude = sp.csr_matrix((np.ones(1), ([0], [right[0]])), shape=(n, n_labels))  # one filtered pair
    evaluator = Evaluator(Y_train, Y_test, exclude, DEFAULT_AB)
    # λ_j's predicted metric: +gap for λ = 1, -gap for λ = 0 (sim_gap: best input - best label sim).
    coef = np.zeros((2, 9))
    coef[0, 4], coef[1, 4] = -1.0, 1.0
    model = QueryLambda(np.array([0.0, 1.0]), 0.5, tau, b, np.zeros(8), np.ones(8), coef)

    joint = (ids.astype(np.int64), sims)
    baselines = (np.zeros((n, 1), np.int64), np.ones((n, 1), np.float32))  # their own searches: not under test here
    result = evaluate_retrieval(Retrievals(joint, baselines, baselines).rows, evaluator,
                                RaeModel(Y_train, RaeSettings(0.5, tau, b)), query_lambda=model, chunk=7)
    summary, per_instance = result["methods"][QUERY_LAMBDA_METHOD], result["per_instance"][QUERY_LAMBDA_METHOD]
    scored = RaeModel(Y_train, RaeSettings(model, model.tau, b)).scores(*joint).toarray()  # as predict scores

    lambdas = model.lambdas(ids[:, :b], sims[:, :b], Y_train)
    assert set(lambdas) == {0.0, 1.0}
    expected_scores = np.zeros((n, n_labels))
    for q in range(n):
        weights = np.exp((sims[q, :b].astype(np.float64) - sims[q, 0]) / tau)
        weights /= weights.sum()
        scores = np.zeros(n_labels)
        for key, weight in zip(ids[q, :b], weights):
            if key < n_train:
                scores += lambdas[q] * weight * Y_train[key].toarray().ravel()
            else:
                scores[key - n_train] += (1 - lambdas[q]) * weight
        expected_scores[q] = scores
    filtered = {(0, int(right[0]))}  # the oracle ranks the labels of positive score, the filtered pair left out
    rankings = [oracle.ranking(sp.csr_matrix(expected_scores), q, filtered) for q in range(n)]
    positives = [set() if q == 0 else {int(right[q])} for q in range(n)]  # row 0's one positive is filtered
    expected = oracle.per_input(rankings, positives, ks=(1,), recall_ks=(10,))
    expected_p1, expected_r10 = expected["P@1"], expected["R@10"]
    np.testing.assert_allclose(scored, expected_scores, atol=1e-12)
    np.testing.assert_array_equal(per_instance["P@1"], expected_p1)
    np.testing.assert_allclose(per_instance["R@10"], expected_r10, rtol=0, atol=1e-9)
    assert summary["P@1"] == pytest.approx(round(100 * np.mean(expected_p1), 2), abs=1e-9)


def test_a_model_fitted_at_another_tau_or_b_is_refused():
    model = QueryLambda(np.array([0.0, 1.0]), 0.5, 0.04, 200)
    assert model.check_settings(0.04, 200) is model
    for tau, b in ((0.1, 200), (0.04, 100)):
        with pytest.raises(DataError, match="rerun the tune stage") as error:
            model.check_settings(tau, b, "tune/query_lambda.json")
        assert error.value.path == "tune/query_lambda.json" and "\n" not in str(error.value)


def test_significance_tests_rae_query_lambda_against_rae_where_the_run_has_it():
    rng = np.random.default_rng(0)
    run = {f"{method}/P@1": rng.integers(0, 2, 50).astype(float)
           for method in ("rae", "dual_encoder", "knn", "rae_query_lambda")}
    report = compare_runs(run, ["P@1"])
    diff = 100 * (run["rae_query_lambda/P@1"] - run["rae/P@1"])
    assert report["rae_query_lambda_vs_rae"]["P@1"]["mean_diff"] == pytest.approx(diff.mean(), abs=1e-9)
    assert set(report) == {"rae_vs_dual_encoder", "rae_vs_knn", "rae_query_lambda_vs_rae"}
    del run["rae_query_lambda/P@1"]
    assert set(compare_runs(run, ["P@1"])) == {"rae_vs_dual_encoder", "rae_vs_knn"}
