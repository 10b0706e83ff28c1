"""Which keys RAE scores (memory.merge.RaeRetrieval), through the real searches and scoring, against dense
brute force: split takes the top b_x input keys and the top b_z label keys, each of its own key set, and
scores them in one softmax; joint is still the top-b of the stacked keys."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from raexmc.memory.exact import ExactIndex
from raexmc.memory.merge import JointSearch, RaeRetrieval, rae_keys
from raexmc.rae.reference import reference_scores
from raexmc.rae.scoring import combine, score_parts
from tests.helpers import dense_top_b_softmax, fp32_dot_error, softmax_error

N_INPUTS, N_LABELS, DIM, TAU, LAM = 30, 12, 8, 0.07, 0.3


def memory(seed: int = 0):
    """Inputs X, labels Z, queries Q (continuous: no ties) and values Y (each input has 1-3 labels)."""
    rng = np.random.default_rng(seed)
    X, Z, Q = (rng.normal(size=(n, DIM)).astype(np.float32) for n in (N_INPUTS, N_LABELS, 9))
    Y = sp.csr_matrix((rng.random((N_INPUTS, N_LABELS)) < 0.15) | (np.arange(N_LABELS) == np.arange(N_INPUTS)[:, None]
                                                                   % N_LABELS), dtype=np.float64)
    return X, Z, Q, Y


def rae_search(search: JointSearch, Q, b: int, retrieval: RaeRetrieval):
    """RAE's keys at b from the two searches, the way RaeModel takes them (no prior here)."""
    return rae_keys(retrieval, *search.search_parts(Q, retrieval.depth(b)), search.inputs.count, b, None, 0.04)


def rae(search: JointSearch, Q, Y, b: int, retrieval: RaeRetrieval) -> np.ndarray:
    """The library's scores: RAE's keys at b, the softmax at τ over the first b of them, p . V at λ."""
    ids, sims = rae_search(search, Q, b, retrieval)
    return combine(score_parts(ids, sims, Y, TAU, b), LAM).toarray()


# (b, label share, input keys, label keys), the counts by hand: b_z = share x b rounded half up
@pytest.mark.parametrize(("b", "share", "num_x", "num_z"), [
    (7, 0.25, 5, 2), (7, 0.5, 3, 4), (5, 0.1, 4, 1), (6, 0.0, 6, 0), (6, 1.0, 0, 6), (20, 0.5, 10, 10)])
def test_split_scores_are_the_brute_force_of_both_halves(b, share, num_x, num_z):
    X, Z, Q, Y = memory()
    retrieval = RaeRetrieval("split", share)
    assert retrieval.counts(b) == (num_x, num_z)
    ids, _ = rae_search(JointSearch(ExactIndex(X), ExactIndex(Z)), Q, b, retrieval)
    assert ((ids >= N_INPUTS).sum(axis=1) == num_z).all() and ((ids >= 0) & (ids < N_INPUTS)).sum() == num_x * len(Q)

    expected = reference_scores(Q, X, Z, Y.toarray(), LAM, TAU, b, num_z / b)
    np.testing.assert_allclose(rae(JointSearch(ExactIndex(X), ExactIndex(Z)), Q, Y, b, retrieval), expected,
                               rtol=0, atol=softmax_error(fp32_dot_error(Q, np.vstack([X, Z])), TAU))


@pytest.mark.parametrize("b", [1, 7, 25])
def test_joint_is_still_the_top_b_of_the_stacked_keys(b):
    """The joint setting gives what the joint search gave before (ExactIndex over [X; Z], and
    JointSearch.search, which predict used), and its scores are the dense top-b softmax of [X; Z]."""
    X, Z, Q, Y = memory(1)
    search = JointSearch(ExactIndex(X), ExactIndex(Z))
    ids, sims = rae_search(search, Q, b, RaeRetrieval())
    # the stacked product sums in another order than the two per key set: on an AVX2 CPU a similarity near -0.094
    # came out 1.9e-7 apart (2e-6 of it), so the bound is fp32's on these vectors' products (some 1.6e-5 of
    # similarities up to 8), and the scores' is what that moves a softmax at τ (some 5e-4 of scores up to 0.7)
    sim_error = fp32_dot_error(Q, np.vstack([X, Z]))
    for reference in (ExactIndex(np.vstack([X, Z])).search(Q, b), search.search(Q, b)):
        np.testing.assert_array_equal(ids, reference[0])
        np.testing.assert_allclose(sims, reference[1], rtol=0, atol=sim_error)

    P = dense_top_b_softmax(Q @ np.vstack([X, Z]).T, b, TAU)
    expected = LAM * P[:, :N_INPUTS] @ Y.toarray() + (1 - LAM) * P[:, N_INPUTS:]
    np.testing.assert_allclose(rae(search, Q, Y, b, RaeRetrieval()), expected, rtol=0,
                               atol=softmax_error(sim_error, TAU))


def test_split_keeps_label_keys_the_joint_top_b_crowds_out():
    """Labels far from the queries beside inputs near them: the joint top-b holds no label key, the split
    one its share."""
    X, Z, Q, _ = memory(2)
    near_inputs = np.vstack([Q + 0.01 * i for i in range(1, 4)])  # each query's 3 nearest keys
    search = JointSearch(ExactIndex(near_inputs), ExactIndex(0.01 * Z))
    joint_ids, _ = rae_search(search, Q, 3, RaeRetrieval())
    split_ids, _ = rae_search(search, Q, 3, RaeRetrieval("split", 0.5))
    assert (joint_ids >= len(near_inputs)).sum() == 0
    assert ((split_ids >= len(near_inputs)).sum(axis=1) == 2).all()  # b_z = 1.5 rounded half up


@pytest.mark.parametrize(("mode", "share"), [("both", None), ("split", None), ("joint", 0.5)])
def test_a_retrieval_without_its_share_or_with_one_it_has_not_is_refused(mode, share):
    with pytest.raises(ValueError, match="split retrieval needs a label share"):
        RaeRetrieval(mode, share)
