"""`RaeModel` gives rae/reference.py's scores: joint and split retrieval, merged keys, the prior. Keys and queries
lie on a 1/64 grid, so similarities are exact in float32 and tie often (both sides break ties to the smaller id)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from raexmc.memory.exact import ExactIndex
from raexmc.memory.key_selection import select_keys
from raexmc.memory.merge import JointSearch, RaeRetrieval
from raexmc.memory.prior import log_prior
from raexmc.rae.model import RaeModel, RaeSettings
from raexmc.rae.reference import reference_scores

N_INPUTS, N_LABELS, N_QUERIES, DIM = 60, 14, 25, 8
ATOL = 1e-6


def on_grid(rng: np.random.Generator, rows: int) -> np.ndarray:
    return (rng.integers(-4, 5, size=(rows, DIM)) / 8).astype(np.float32)


@pytest.fixture(scope="module")
def memory():
    rng = np.random.default_rng(5)
    X, Z, Q = on_grid(rng, N_INPUTS), on_grid(rng, N_LABELS), on_grid(rng, N_QUERIES)
    Y = sp.csr_matrix((rng.random((N_INPUTS, N_LABELS)) < 0.2).astype(np.float64))
    return X, Z, Q, Y


def model_scores(X, Z, Q, values, lam, tau, b, label_share=None, log_counts=None) -> np.ndarray:
    retrieval = RaeRetrieval() if label_share is None else RaeRetrieval("split", label_share)
    model = RaeModel(sp.csr_matrix(values), RaeSettings(lam, tau, b, retrieval), log_counts,
                     search=JointSearch(ExactIndex(X), ExactIndex(Z)))
    return model.scores_for(Q).toarray()


@pytest.mark.parametrize(("lam", "tau", "b", "label_share"), [
    (0.5, 0.04, 10, None), (0.3, 0.1, 7, None), (0.0, 0.07, 5, None), (1.0, 0.07, 74, None),  # 74: every key
    (0.5, 0.04, 10, 0.5), (0.5, 0.04, 5, 0.5), (0.7, 0.1, 9, 0.25), (0.5, 0.04, 6, 1.0),  # 5: 2.5 rounds up
    (0.5, 0.04, 20, 1.0)])  # share x b = 20 label keys asked of 14: every label key, no input key
def test_the_model_scores_as_the_reference(memory, lam, tau, b, label_share):
    X, Z, Q, Y = memory
    expected = reference_scores(Q, X, Z, Y.toarray(), lam, tau, b, label_share)
    np.testing.assert_allclose(model_scores(X, Z, Q, Y, lam, tau, b, label_share), expected, rtol=0, atol=ATOL)


@pytest.mark.parametrize("label_share", [None, 0.4])
@pytest.mark.parametrize("prior", [False, True])
def test_a_smaller_memory_with_its_prior_scores_as_the_reference(memory, label_share, prior):
    """keep 0.25: 15 k-means keys (moved back onto the grid), each with its members' mean value row and, with the
    prior, log n added to its logit."""
    X, Z, Q, Y = memory
    selected = select_keys(X / np.linalg.norm(X, axis=1, keepdims=True).clip(1e-9), Y, 0.25, "kmeans", seed=3)
    keys = (np.round(selected.keys * 64) / 64).astype(np.float32)
    assert len(keys) == 15 and selected.counts.max() > 1, "merged keys, so the prior has counts to weigh"
    log_counts = log_prior(prior, selected.counts)
    expected = reference_scores(Q, keys, Z, selected.values.toarray(), 0.5, 0.07, 8, label_share, log_counts)
    got = model_scores(keys, Z, Q, selected.values, 0.5, 0.07, 8, label_share, log_counts)
    np.testing.assert_allclose(got, expected, rtol=0, atol=ATOL)


def test_the_reference_is_the_paper_s_formula_on_a_hand_worked_query():
    """One query, two inputs and two labels, b = 2 (joint): the keys at similarity 1 (input 0) and 0.5 (label 1)
    are retrieved, p = (e^{1/τ}, e^{0.5/τ}) / Σ, and the scores are p_0·λ·Y_0 + p_1·(1−λ)·e_1."""
    X = np.array([[1.0, 0.0], [0.0, -1.0]])
    Z = np.array([[-1.0, 0.0], [0.5, 0.0]])
    Y = np.array([[1.0, 1.0], [0.0, 1.0]])
    tau, lam = 0.5, 0.25
    p0, p1 = np.exp(1 / tau), np.exp(0.5 / tau)
    p0, p1 = p0 / (p0 + p1), p1 / (p0 + p1)
    expected = [p0 * lam * 1.0, p0 * lam * 1.0 + p1 * (1 - lam)]
    np.testing.assert_allclose(reference_scores(np.array([[1.0, 0.0]]), X, Z, Y, lam, tau, 2)[0], expected,
                               rtol=0, atol=1e-12)
