"""The per-query λ model: features on a hand-worked retrieval, the ridge choice, the fallback, JSON."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import scipy.sparse as sp

from raexmc.errors import DataError
from raexmc.rae.query_lambda import FEATURES, QueryLambda, fit_query_lambda, query_features

# tau = 1 / ln 2 makes exp(s / tau) = 2 ** s: integer similarities give power-of-two softmax weights.
TAU2 = 1.0 / math.log(2.0)
NEG = -np.inf


def _entropy(probs: list[float]) -> float:
    return -sum(p * math.log(p) for p in probs)


def test_features_hand_example_and_a_query_without_keys():
    # Memory: 2 training inputs (key ids 0, 1), 3 labels (ids 2, 3, 4); input 0 has labels {0, 2},
    # input 1 label {1}; b = 3.
    Y = sp.csr_matrix(np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]))
    ids = np.array([[4, 0, -1, 2, 3], [1, 0, -1, -1, -1]], dtype=np.int64)
    sims = np.array([[2, 1, NEG, 0, -1], [3, 1, NEG, NEG, NEG]], dtype=np.float32)
    got = query_features(ids, sims, Y, tau=TAU2, b=3)
    # Query 0 keeps keys 4, 0, 2 (the pad is skipped, key 3 is the 4th valid): one input of three;
    #   best input sim 1, best label sim 2; weights 4, 2, 1 -> 4/7, 2/7, 1/7; input mass 2/7.
    #   Input half: 2/7 * Y[0] = [2/7, 0, 2/7], favourite label 0 (a tie with 2, the smaller wins).
    #   Label half: [1/7, 0, 4/7] (key 2 is label 0, key 4 label 2), favourite label 2.
    #   The inputs score label 2 at 2/7 of their best 2/7 -> 1; the labels score label 0 at 1/7 of 4/7.
    # Query 1 keeps its two inputs 1 and 0: no label key, so its best label sim is its lowest kept
    #   sim, 1; weights 8, 2 -> 0.8, 0.2; all the mass on inputs; an empty label half -> 0 and 0.
    expected = {
        "input_share": [1 / 3, 1.0],
        "best_input_sim": [1.0, 3.0],
        "best_label_sim": [2.0, 1.0],
        "sim_gap": [-1.0, 2.0],
        "entropy": [_entropy([4 / 7, 2 / 7, 1 / 7]), _entropy([0.8, 0.2])],
        "input_mass": [2 / 7, 1.0],
        "inputs_back_label_top": [1.0, 0.0],
        "labels_back_input_top": [1 / 4, 0.0],
    }
    assert got.shape == (2, len(FEATURES)) and set(FEATURES) == set(expected)
    for column, name in enumerate(FEATURES):
        np.testing.assert_allclose(got[:, column], expected[name], rtol=0, atol=1e-6, err_msg=name)
    # a query without keys has zero features
    got = query_features(np.array([[-1, -1], [0, 2]]), np.array([[NEG, NEG], [0.5, 0.25]], np.float32),
                         sp.csr_matrix(np.array([[1.0, 0.0]])), tau=0.1)
    np.testing.assert_array_equal(got[0], np.zeros(len(FEATURES)))
    assert np.isfinite(got).all()


def _two_kinds(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features where column 0 tells the kind, and targets on the grid (0, 0.5, 1): kind 0 scores only
    at lambda 0, kind 1 only at lambda 1; lambda 0.5 is worse for both. Other columns are noise."""
    kind = rng.integers(0, 2, n)
    features = rng.standard_normal((n, len(FEATURES)))
    features[:, 0] = kind + 0.1 * rng.standard_normal(n)
    targets = np.column_stack([kind == 0, np.zeros(n), kind == 1]).astype(float)
    return features, targets, kind


def _round_trips(model: QueryLambda, features: np.ndarray) -> None:
    loaded = QueryLambda.from_json(json.loads(json.dumps(model.to_json())))
    assert loaded.to_json() == model.to_json()
    np.testing.assert_array_equal(loaded.choose(features), model.choose(features))


def test_ridge_model_picks_the_lambda_of_each_kind_or_falls_back_without_a_signal_and_both_round_trip_json():
    rng = np.random.default_rng(0)
    features, targets, _ = _two_kinds(rng, 300)
    model, report = fit_query_lambda(features, targets, np.array([0.0, 0.5, 1.0]), tau=0.04, b=200)
    assert report["uses_model"] and report["model_cv_mean"] > report["fixed_mean"]
    held_features, _, held_kind = _two_kinds(rng, 200)
    np.testing.assert_array_equal(model.choose(held_features), held_kind.astype(float))
    _round_trips(model, held_features)
    rng = np.random.default_rng(1)  # the fallback where the features carry no signal
    _, targets, _ = _two_kinds(rng, 300)
    noise = rng.standard_normal((300, len(FEATURES)))
    model, report = fit_query_lambda(noise, targets, np.array([0.0, 0.5, 1.0]), tau=0.04, b=200)
    best_fixed = float(np.array([0.0, 0.5, 1.0])[targets.mean(axis=0).argmax()])
    assert not report["uses_model"] and not model.uses_model
    assert model.fallback == report["fixed_lambda"] == best_fixed
    np.testing.assert_array_equal(model.choose(noise[:7]), np.full(7, best_fixed))
    _round_trips(model, noise)


def test_a_given_fixed_lambda_is_the_bar_and_the_fallback_even_in_a_tie():
    """Targets tie at 0.3 and 0.5: by default the first of them, else the given one (the tune stage's
    choice, whose ties break towards 0.5)."""
    rng = np.random.default_rng(6)
    noise = rng.standard_normal((40, len(FEATURES)))
    hits = (np.arange(40) % 2).astype(float)
    targets = np.column_stack([np.zeros(40), hits, hits, np.zeros(40)])
    grid = np.array([0.0, 0.3, 0.5, 1.0])
    default, _ = fit_query_lambda(noise, targets, grid, 0.04, 200)
    given, report = fit_query_lambda(noise, targets, grid, 0.04, 200, fixed_lambda=0.5)
    assert (default.fallback, given.fallback, report["fixed_lambda"]) == (0.3, 0.5, 0.5)
    assert not report["uses_model"] and report["fixed_mean"] == 0.5
    with pytest.raises(DataError, match="not on the grid"):
        fit_query_lambda(noise, targets, grid, 0.04, 200, fixed_lambda=0.7)


def test_bad_model_json_and_bad_fit_inputs_are_data_errors():
    model, _ = fit_query_lambda(*_two_kinds(np.random.default_rng(3), 100)[:2], np.array([0.0, 0.5, 1.0]), 0.04, 200)
    good = model.to_json()
    for bad in ({**good, "features": ["input_share"]}, {**good, "coef": good["coef"][:2]},
                {k: v for k, v in good.items() if k != "grid"}, {**good, "fallback": 2.0}, {**good, "tau": 0}):
        with pytest.raises(DataError, match="query_lambda.json"):
            QueryLambda.from_json(bad, origin="query_lambda.json")
    features, targets, _ = _two_kinds(np.random.default_rng(4), 100)  # the fit checks its inputs
    grid = np.array([0.0, 0.5, 1.0])
    with pytest.raises(DataError, match="targets"):
        fit_query_lambda(features, targets[:, :2], grid, 0.04, 200)
    with pytest.raises(DataError, match="at least 10 queries"):
        fit_query_lambda(features[:9], targets[:9], grid, 0.04, 200)
    with pytest.raises(DataError, match="grid"):
        fit_query_lambda(features, targets, np.array([0.0, 0.5, 2.0]), 0.04, 200)


def test_agreement_features_match_a_dense_loop():
    rng = np.random.default_rng(5)
    num_train, num_labels, n = 30, 12, 25
    Y = sp.random(num_train, num_labels, density=0.2, random_state=6, format="csr")
    Y.data[:] = 1.0
    ids = np.stack([rng.permutation(num_train + num_labels)[:8] for _ in range(n)])
    sims = -np.sort(-rng.uniform(0, 1, (n, 8)), axis=1).astype(np.float32)
    sims[:, 4] = sims[:, 3]  # a tie between keys
    got = query_features(ids, sims, Y, tau=0.05)
    P = np.zeros((n, num_train + num_labels))
    for q in range(n):
        w = np.exp((sims[q].astype(np.float64) - sims[q].max()) / 0.05)
        P[q, ids[q]] = w / w.sum()
    halves = P[:, :num_train] @ Y.toarray(), P[:, num_train:]
    for column, (scorer, other) in ((6, halves), (7, halves[::-1])):
        for q in range(n):
            favourite = int(np.argmax(other[q]))  # first maximum: the smaller label id
            expected = scorer[q, favourite] / scorer[q].max() if other[q].max() > 0 and scorer[q].max() > 0 else 0.0
            assert got[q, column] == pytest.approx(expected, rel=1e-9, abs=1e-12), (q, FEATURES[column])
