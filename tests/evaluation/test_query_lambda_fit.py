"""The per-query λ model fitted through the real evaluator on a synthetic retrieval problem with two
kinds of queries: one needs λ = 1, the other λ = 0, and every fixed λ gets at most one kind right."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from raexmc.evaluation import evaluator as evaluator_module
from raexmc.evaluation.evaluator import Evaluator
from raexmc.evaluation.propensity import DEFAULT_AB
from raexmc.evaluation.query_lambda_fit import (
    fit_on_selection,
    fit_on_validation,
    metric_by_lambda,
)
from raexmc.evaluation.selection_file import Selection
from raexmc.evaluation.tune_settings import TuneSettings
from raexmc.evaluation.validation_memory import HeldOutLabels, ValidationRetrieval
from raexmc.memory.search import sort_rows
from raexmc.rae.model import RaeModel, RaeSettings
from tests.helpers import selection_record

NUM_LABELS, NUM_TRAIN = 10, 20  # training input i has the one label i % 10
Y_TRAIN = sp.csr_matrix((np.ones(NUM_TRAIN), np.arange(NUM_TRAIN) % NUM_LABELS, np.arange(NUM_TRAIN + 1)),
                        shape=(NUM_TRAIN, NUM_LABELS))
GRID = np.array([0.0, 0.5, 1.0])
TAU = 0.1


def _queries(rng: np.random.Generator, n: int, separable: bool = True):
    """(joint retrieval, evaluator, kind) of n queries, each with a right label r and a wrong one w.

    Kind 1 (needs λ = 1): the label key of w at sim 1.0, the two inputs of r at 0.8: the label key
    holds about 79% of the mass. Kind 0 (needs λ = 0): the two inputs of w at 1.0, the label key of r
    at 0.8: the inputs hold about 94%. At λ = 0.5 both rank w first. Sims get a little jitter.
    `separable=False` gives both kinds kind 1's retrieval (the kinds differ only in which label is
    right), so no feature can tell them apart.
    """
    kind = rng.integers(0, 2, n)
    low = rng.integers(0, NUM_LABELS, n)  # the label of the keys at sim 0.8: the right one, when separable
    high = (low + rng.integers(1, NUM_LABELS, n)) % NUM_LABELS  # the label of the keys at sim 1.0
    looks_like_1 = (kind == 1) | (not separable)
    ids = np.where(looks_like_1[:, None],
                   np.column_stack([NUM_TRAIN + high, low, low + NUM_LABELS]),
                   np.column_stack([high, high + NUM_LABELS, NUM_TRAIN + low]))
    sims = np.where(looks_like_1[:, None], [1.0, 0.8, 0.8], [1.0, 1.0, 0.8]) + rng.uniform(-0.01, 0.01, (n, 3))
    truth = low if separable else np.where(kind == 1, low, high)
    Y_test = sp.csr_matrix((np.ones(n), truth, np.arange(n + 1)), shape=(n, NUM_LABELS))
    evaluator = Evaluator(Y_TRAIN, Y_test, sp.csr_matrix((n, NUM_LABELS)), DEFAULT_AB)
    return (ids.astype(np.int64), sims.astype(np.float32)), evaluator, kind


def test_fitted_model_picks_lambda_per_kind_and_beats_every_fixed_lambda():
    rng = np.random.default_rng(0)
    model, report = fit_on_validation(*_queries(rng, 200)[:2], GRID, TAU, b=3)
    assert report["uses_model"] and report["metric"] == "P@1"

    joint, evaluator, kind = _queries(rng, 300)
    fixed = metric_by_lambda(joint, evaluator, GRID, TAU, 3).mean(axis=0)
    assert fixed.max() < 0.6  # every fixed λ gets at most one kind right
    lambdas = model.lambdas(*joint, Y_TRAIN)
    np.testing.assert_array_equal(lambdas, kind.astype(float))
    per_query = RaeModel(Y_TRAIN, RaeSettings(model, TAU, 3))  # each query at its own λ, as predict scores it
    ranked = evaluator.rank(len(kind), lambda rows: per_query.scores(joint[0][rows], joint[1][rows]))
    assert evaluator.per_query_values(ranked)["P@1"].mean() == 1.0


def test_fallback_to_the_best_fixed_lambda_when_features_cannot_tell_the_kinds():
    rng = np.random.default_rng(1)
    joint, evaluator, kind = _queries(rng, 200, separable=False)
    model, report = fit_on_validation(joint, evaluator, GRID, TAU, b=3)
    # Kind 0 is right at λ = 0 and 0.5 (the wrong label's key dominates), kind 1 only at λ = 1.
    best_fixed = 0.0 if (kind == 0).sum() >= (kind == 1).sum() else 1.0
    assert not model.uses_model and not report["uses_model"]
    assert model.fallback == best_fixed
    np.testing.assert_array_equal(model.lambdas(*joint, Y_TRAIN), np.full(200, best_fixed))
    with pytest.raises(ValueError, match="P@2"):  # an unknown metric is a programming error
        metric_by_lambda(joint, evaluator, GRID, TAU, 3, metric="P@2")


def test_the_tune_stage_fit_falls_back_to_its_chosen_lambda_in_a_tie():
    """Kind 0 is right at λ = 0 and 0.5 alike; where it is the majority the fit's own best is 0, but
    the tune stage breaks that tie towards 0.5, and the per-query model must fall back to its choice."""
    rng = np.random.default_rng(8)
    joint, evaluator, kind = _queries(rng, 200, separable=False)
    assert (kind == 0).sum() > (kind == 1).sum()
    ids, sims = joint  # the joint retrieval as the two searches it merges: input keys, then label keys
    is_input = ids < NUM_TRAIN
    halves = [sort_rows(np.where(keep, ids - offset, -1), np.where(keep, sims, -np.inf).astype(np.float32))
              for keep, offset in ((is_input, 0), (~is_input, NUM_TRAIN))]
    retrieval = ValidationRetrieval(*halves, 3, HeldOutLabels(evaluator.truth, Y_TRAIN,
                                                              sp.csr_matrix((200, NUM_LABELS)), np.arange(200),
                                                              np.arange(NUM_TRAIN)), Y_TRAIN)
    settings = TuneSettings(lam=None, tau=TAU, lambda_grid=tuple(GRID), tau_grid=(TAU,), metric="P@1", b=3,
                            val_fraction=0.05, val_max_queries=20000, val_seed=0, relevance="binary")

    chosen = Selection.model_validate(selection_record(**{"lambda": 0.5, "tau": TAU, "b": 3}))
    model, report = fit_on_selection(retrieval, settings, chosen, DEFAULT_AB)

    assert not report["uses_model"] and model.fallback == report["fixed_lambda"] == 0.5
    assert fit_on_validation(joint, evaluator, GRID, TAU, b=3)[0].fallback == 0.0


def test_the_fit_is_the_same_through_chunks_of_queries(monkeypatch):
    """The features are computed a chunk of queries at a time; no feature of a query depends on the others."""
    joint, evaluator, _ = _queries(np.random.default_rng(3), 200)
    whole = fit_on_validation(joint, evaluator, GRID, TAU, b=3)
    monkeypatch.setattr(evaluator_module, "QUERY_CHUNK", 7)
    chunked = fit_on_validation(joint, evaluator, GRID, TAU, b=3)
    assert chunked[1] == whole[1]
    np.testing.assert_array_equal(chunked[0].lambdas(*joint, Y_TRAIN), whole[0].lambdas(*joint, Y_TRAIN))
