"""RAE-XMC scoring from retrieved keys: hand-worked examples, then cross-checks on random data
against a dense brute-force search over the whole knowledge memory."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from raexmc.errors import DataError
from raexmc.rae.model import RaeModel, RaeSettings
from raexmc.rae.pairs import in_pattern
from raexmc.rae.ranking import top_k, top_k_parts
from raexmc.rae.scoring import (
    combine,
    key_probabilities,
    knn_scores,
    ova_knn_scores,
    score_parts,
    train_key_counts,
)
from tests.evaluation.tune_helpers import exact_search
from tests.helpers import dense_top_b_softmax, unit_rows

# With tau = 1 / ln 2, exp(s / tau) = 2 ** s, so integer similarities give power-of-two weights.
TAU2 = 1.0 / math.log(2.0)
NEG = -np.inf

# Memory of the hand examples: N = 2 training inputs (key ids 0, 1), L = 3 labels (key ids 2, 3, 4).
# Training input 0 has labels {0, 2}, training input 1 has label {1}.
Y_HAND = sp.csr_matrix(np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]))
IDS_HAND = np.array([[2, 0, 4, -1], [1, 3, 0, 2], [-1, -1, -1, -1]], dtype=np.int64)
SIMS_HAND = np.array([[2, 1, 0, NEG], [1, 1, 0, -1], [NEG, NEG, NEG, NEG]], dtype=np.float32)


def rae_scores(ids, sims, Y, lam=0.5, tau=TAU2, b=None) -> sp.csr_matrix:
    """RAE's scores of retrieved keys, as every caller gets them: RaeModel.scores."""
    return RaeModel(sp.csr_matrix(Y), RaeSettings(lam, tau, b)).scores(ids, sims)


def test_key_probabilities_hand_example():
    p = key_probabilities(SIMS_HAND, IDS_HAND, TAU2, num_keys=5)
    # Row 0: weights 2^2, 2^1, 2^0 = 4, 2, 1 (sum 7) on keys 2, 0, 4; the -1 pad is ignored.
    # Row 1: weights 2, 2, 1, 1/2 (sum 5.5) on keys 1, 3, 0, 2 -> 4/11, 4/11, 2/11, 1/11.
    # Row 2: no valid key -> all zero.
    expected = [[2 / 7, 0.0, 4 / 7, 0.0, 1 / 7], [2 / 11, 4 / 11, 1 / 11, 4 / 11, 0.0], [0.0] * 5]
    np.testing.assert_allclose(p.toarray(), expected, rtol=0, atol=1e-9)
    assert sp.isspmatrix_csr(p) and p.shape == (3, 5) and p.has_canonical_format
    assert p.nnz == 3 + 4  # only the valid retrieved keys are stored


# Row 0: kNN part = 2/7 * Y[0] = [2/7, 0, 2/7]; label part = [4/7, 0, 1/7] (keys 2 -> label 0, 4 -> label 2).
# Row 1: kNN part = 4/11 * Y[1] + 2/11 * Y[0] = [2/11, 4/11, 2/11]; label part = [1/11, 4/11, 0].
# λ = 0.5 halves their sum; λ = 0 stores only labels reached through label keys: row 1 reaches label 2 only
# through training key 0, so it is not stored.
@pytest.mark.parametrize(("lam", "expected", "stored"), [
    (0.5, [[3 / 7, 0, 3 / 14], [3 / 22, 4 / 11, 1 / 11], [0, 0, 0]], [[0, 2], [0, 1, 2], []]),
    (1.0, [[2 / 7, 0, 2 / 7], [2 / 11, 4 / 11, 2 / 11], [0, 0, 0]], [[0, 2], [0, 1, 2], []]),
    (0.0, [[4 / 7, 0, 1 / 7], [1 / 11, 4 / 11, 0], [0, 0, 0]], [[0, 2], [0, 1], []])])
def test_rae_scores_hand_example(lam, expected, stored):
    scores = rae_scores(IDS_HAND, SIMS_HAND, Y_HAND, lam)
    assert sp.isspmatrix_csr(scores) and scores.shape == (3, 3)
    np.testing.assert_allclose(scores.toarray(), expected, rtol=0, atol=1e-9)
    assert [list(scores[i].indices) for i in range(3)] == stored


def test_b_smaller_than_retrieved_width_and_the_baselines_hand_example():
    # Row 0 keeps keys 2, 0 with weights 4, 2 -> 2/3, 1/3: kNN [1/3, 0, 1/3], label [2/3, 0, 0]
    #        -> 0.5 * [1, 0, 1/3] = [1/2, 0, 1/6].
    # Row 1 keeps keys 1, 3 with weights 2, 2 -> 1/2 each: kNN [0, 1/2, 0], label [0, 1/2, 0] -> [0, 1/2, 0].
    expected = [[1 / 2, 0.0, 1 / 6], [0.0, 1 / 2, 0.0], [0.0, 0.0, 0.0]]
    np.testing.assert_allclose(rae_scores(IDS_HAND, SIMS_HAND, Y_HAND, b=2).toarray(), expected, rtol=0, atol=1e-9)
    # b = 1 is the single best key: row 0 -> label key 2 (label 0) with p = 1 -> 0.5 on label 0.
    top1 = rae_scores(IDS_HAND, SIMS_HAND, Y_HAND, b=1).toarray()
    np.testing.assert_allclose(top1[0], [0.5, 0.0, 0.0], rtol=0, atol=1e-9)
    full = rae_scores(IDS_HAND, SIMS_HAND, Y_HAND).toarray()
    for b in (4, 100):  # b at or above the width changes nothing
        np.testing.assert_allclose(rae_scores(IDS_HAND, SIMS_HAND, Y_HAND, b=b).toarray(), full, rtol=0, atol=1e-9)
    # label-only search of one query: labels 2 and 0 at similarities 1 and 0 -> weights 2/3, 1/3
    de = key_probabilities(np.array([[1, 0, NEG]], np.float32), np.array([[2, 0, -1]]), TAU2, 3)
    np.testing.assert_allclose(de.toarray(), [[1 / 3, 0, 2 / 3]], rtol=0, atol=1e-9)
    # input-only search: inputs 1 and 0 at similarities 2 and 0 -> weights 4/5, 1/5
    knn = knn_scores(np.array([[1, 0]]), np.array([[2, 0]], np.float32), Y_HAND, tau=TAU2)
    np.testing.assert_allclose(knn.toarray(), [[1 / 5, 4 / 5, 1 / 5]], rtol=0, atol=1e-9)


def test_padding_anywhere_is_ignored_and_b_counts_valid_keys_and_all_padding_scores_nothing():
    # A -1 id (whatever its sim) and a -inf sim are both padding, even in the middle of a row.
    ids = np.array([[2, -1, 0, 4, 3]], dtype=np.int64)
    sims = np.array([[2, 5, NEG, 1, 0]], dtype=np.float32)
    # Valid: key 2 (2^2 = 4), key 4 (2^1 = 2), key 3 (2^0 = 1); sum 7. b = 2 keeps keys 2 and 4: 4/6 and 2/6.
    np.testing.assert_allclose(key_probabilities(sims, ids, TAU2, num_keys=5).toarray(),
                               [[0, 0, 4 / 7, 1 / 7, 2 / 7]], rtol=0, atol=1e-9)
    np.testing.assert_allclose(key_probabilities(sims, ids, TAU2, num_keys=5, b=2).toarray(),
                               [[0, 0, 2 / 3, 0, 1 / 3]], rtol=0, atol=1e-9)
    ids = np.full((2, 3), -1, dtype=np.int64)  # all padding, then an empty batch
    scores = rae_scores(ids, np.full((2, 3), NEG, dtype=np.float32), Y_HAND, tau=0.04)
    assert scores.shape == (2, 3) and scores.nnz == 0
    assert rae_scores(np.zeros((0, 4), np.int64), np.zeros((0, 4), np.float32), Y_HAND, tau=0.04).shape == (0, 3)
    assert train_key_counts(ids, num_train=2).tolist() == [0, 0]


def test_large_tau_gives_uniform_weights_and_tiny_tau_is_stable():
    ids = np.array([[3, 0, 1, 4, -1]], dtype=np.int64)
    sims = np.array([[0.9, 0.5, -0.3, -0.8, NEG]], dtype=np.float32)
    p = key_probabilities(sims, ids, tau=1e9, num_keys=5).toarray()
    np.testing.assert_allclose(p, [[1 / 4, 1 / 4, 0, 1 / 4, 1 / 4]], rtol=0, atol=1e-9)
    # Scores then weigh each of the 4 keys 1/4: kNN = (Y[0] + Y[1]) / 4 = [1/4, 1/4, 1/4],
    # labels = keys 3, 4 -> labels 1, 2 at 1/4 each; lam = 0.5 -> [1/8, 1/4, 1/4].
    np.testing.assert_allclose(rae_scores(ids, sims, Y_HAND, tau=1e9).toarray(), [[1 / 8, 1 / 4, 1 / 4]], rtol=0,
                               atol=1e-9)
    # sims / tau ~ 1e6: without subtracting the row max exp would overflow to inf.
    tiny = key_probabilities(np.array([[0.9, 0.8]], np.float32), np.array([[2, 0]]), tau=1e-6, num_keys=5)
    np.testing.assert_allclose(tiny.toarray(), [[0, 0, 1, 0, 0]], rtol=0, atol=1e-9)


# num_train = 2: ids 0, 1 are training inputs, larger ids are labels (2 is the first label key).
# Row 0 keeps 0, 5, 1 (2 train), row 1 keeps 4, 3 (0 train); b = 1: keys 0 and 4; b = 2: 0, 5 and 4, 3.
@pytest.mark.parametrize(("ids", "b", "expected"), [
    ([[0, 5, 1, -1], [4, 3, -1, -1]], None, [2, 5]), ([[0, 5, 1, -1], [4, 3, -1, -1]], 1, [1, 2]),
    ([[0, 5, 1, -1], [4, 3, -1, -1]], 2, [1, 4]), ([[2, 1, 0]], None, [2, 3]), ([[2, 1, 0]], 1, [0, 1])])
def test_train_key_counts_hand_example(ids, b, expected):
    assert train_key_counts(np.array(ids, dtype=np.int64), num_train=2, b=b).tolist() == expected


ONE_KEY, ONE_SIM = np.zeros((1, 1), np.int64), np.zeros((1, 1), np.float32)
BAD_CALLS = [  # (what a call is handed, the setting its ValueError names, the calls)
    *((lam, "infer.lambda", (lambda v: rae_scores(IDS_HAND, SIMS_HAND, Y_HAND, lam=v, tau=0.04),
                             lambda v: ova_knn_scores(ONE_KEY, ONE_SIM, ONE_KEY, ONE_SIM, Y_HAND, v, 0.04)))
      for lam in (-0.01, 1.01, float("nan"), "half")),
    *((tau, "infer.tau", (lambda v: rae_scores(IDS_HAND, SIMS_HAND, Y_HAND, tau=v),
                          lambda v: key_probabilities(SIMS_HAND, IDS_HAND, v, num_keys=5)))
      for tau in (0.0, -0.04, float("nan"), float("inf"))),
    *((b, "infer.b", (lambda v: rae_scores(IDS_HAND, SIMS_HAND, Y_HAND, tau=0.04, b=v),
                      lambda v: score_parts(IDS_HAND, SIMS_HAND, Y_HAND, 0.04, v)))
      for b in (0, -3, 2.5, True))]


@pytest.mark.parametrize(("value", "key", "calls"), BAD_CALLS)
def test_a_bad_lambda_tau_or_b_handed_in_code_is_a_value_error(value, key, calls):
    for call in calls:
        with pytest.raises(ValueError, match=key):
            call(value)


def test_bad_retrieval_is_a_data_error():
    with pytest.raises(DataError, match="outside the memory"):
        key_probabilities(SIMS_HAND, IDS_HAND, TAU2, num_keys=4)  # key id 4 with only 4 keys
    with pytest.raises(DataError, match="shape"):
        rae_scores(IDS_HAND, SIMS_HAND[:, :3], Y_HAND, tau=0.04)
    with pytest.raises(DataError, match="nan"):
        rae_scores(IDS_HAND, np.where(IDS_HAND == 0, np.nan, SIMS_HAND), Y_HAND, tau=0.04)
    with pytest.raises(DataError, match="outside the memory"):
        knn_scores(np.array([[2]]), np.array([[1.0]], np.float32), Y_HAND)  # only inputs 0 and 1 exist


@pytest.fixture(scope="module")
def memory():
    rng = np.random.default_rng(7)
    X, Z, Q = (unit_rows(rng, n, 6, np.float64) for n in (40, 15, 9))
    Y = sp.random(40, 15, density=0.2, random_state=3, format="csr")
    Y.data[:] = 1.0
    ids, sims = exact_search(Q, np.vstack([X, Z]), width=30)
    ids[2, 20:], sims[2, 20:] = -1, NEG  # one query got fewer results back from its index
    return {"X": X, "Z": Z, "Q": Q, "Y": Y, "ids": ids, "sims": sims}


def _dense_rae(Q, X, Z, Y, lam, tau, b):
    """Brute force over the whole memory: q K^T, top-b, softmax, times the dense values V."""
    P = dense_top_b_softmax(Q @ np.vstack([X, Z]).T, b, tau)
    return P @ np.vstack([lam * Y.toarray(), (1.0 - lam) * np.eye(Z.shape[0])])


@pytest.mark.parametrize("tau", [0.04, 0.3, 1.0])
@pytest.mark.parametrize("b", [None, 1, 5, 17, 30])
def test_rae_scores_match_dense_brute_force(memory, tau, b):
    m = memory
    width = 30 if b is None else b
    for lam in (0.0, 0.25, 0.5, 0.9, 1.0):
        got = rae_scores(m["ids"], m["sims"], m["Y"], lam=lam, tau=tau, b=b)
        dense = _dense_rae(m["Q"], m["X"], m["Z"], m["Y"], lam, tau, width)
        # query 2's index gave back only its top 20 keys: it scores as the dense top-min(b, 20)
        dense[2] = _dense_rae(m["Q"][2:3], m["X"], m["Z"], m["Y"], lam, tau, min(width, 20))[0]
        np.testing.assert_allclose(got.toarray(), dense, rtol=1e-9, atol=1e-12)
        assert got.nnz == np.count_nonzero(got.toarray()), "stored entries are the labels with a nonzero score"


def test_parts_combine_linearly_probabilities_sum_to_one_and_an_end_lambda_stores_no_zeros(memory):
    m = memory
    knn, labels = score_parts(m["ids"], m["sims"], m["Y"], 0.04, 10)
    for lam in (0.0, 0.1, 0.5, 1.0):
        expected = (lam * knn + (1 - lam) * labels).toarray()
        got = combine((knn, labels), lam)
        np.testing.assert_allclose(got.toarray(), expected, rtol=0, atol=1e-12)
        assert got.nnz == np.count_nonzero(expected)  # lam = 0 or 1 leaves no stored zeros behind
    P = key_probabilities(m["sims"], m["ids"], 0.04, m["X"].shape[0] + m["Z"].shape[0], 10)
    np.testing.assert_allclose(np.asarray(P.sum(axis=1)).ravel(), 1.0, rtol=0, atol=1e-12)


@pytest.mark.parametrize("lam", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("b", [None, 4])
def test_ova_knn_scores_match_dense_reference_and_differ_from_the_joint_softmax(memory, lam, b):
    m, tau = memory, 0.05
    x_ids, x_sims = exact_search(m["Q"], m["X"], width=12)
    z_ids, z_sims = exact_search(m["Q"], m["Z"], width=20)  # wider than L = 15: padded
    got = ova_knn_scores(x_ids, x_sims, z_ids, z_sims, m["Y"], lam=lam, tau=tau, b=b)
    expected = lam * dense_top_b_softmax(m["Q"] @ m["X"].T, b or 12, tau) @ m["Y"].toarray() + (
        1 - lam) * dense_top_b_softmax(m["Q"] @ m["Z"].T, b or 15, tau)
    np.testing.assert_allclose(got.toarray(), expected, rtol=1e-9, atol=1e-12)
    if 0 < lam < 1:  # the joint memory normalises over both kinds of keys together, OvA+kNN over each separately
        joint = rae_scores(*exact_search(m["Q"], np.vstack([m["X"], m["Z"]]), 55), m["Y"], lam=lam, tau=tau, b=b)
        assert not np.allclose(got.toarray(), joint.toarray(), rtol=0, atol=1e-6)


def test_cut_parts_rank_as_the_whole_parts_at_every_lambda_ties_and_excluded_pairs_included():
    rng = np.random.default_rng(7)
    Y = sp.random(300, 60, density=0.15, random_state=5, format="csr")
    Y.data[:] = 1.0
    ids = np.stack([rng.choice(360, size=40, replace=False) for _ in range(50)])
    sims = -np.sort(-np.round(rng.uniform(0.2, 0.9, size=ids.shape), 1), axis=1)  # many exact ties
    exclude = sp.random(50, 60, density=0.1, random_state=6, format="csr")
    for tau, k in ((0.04, 1), (0.3, 5), (1.0, 20)):
        parts = score_parts(ids, sims, Y, tau, 30)
        cut = top_k_parts(parts, k, exclude)
        assert cut[0].nnz < parts[0].nnz / 2 and cut[1] is parts[1]
        for lam in (0.0, 1e-9, 0.1, 0.5, 0.77, 1.0):
            whole = top_k(combine(parts, lam), k, exclude)
            assert (top_k(combine(cut, lam), k, exclude) == whole).all(), (tau, k, lam)


def test_a_label_one_ulp_below_the_kth_that_lambda_rounds_to_a_tie_is_kept():
    # 0.3 * a rounds both values below to the same float, so at λ 0.3 the smaller label 0 wins the tie
    high, low = 0.9415651814089914, np.nextafter(0.9415651814089914, 0.0)
    assert 0.3 * high == 0.3 * low
    knn = sp.csr_matrix(np.array([[low, high, 0.5]]))
    parts = (knn, sp.csr_matrix((1, 3)))
    assert top_k(combine(parts, 0.3), 1).tolist() == [[0]]
    cut = top_k_parts(parts, 1)
    assert cut[0].indices.tolist() == [0, 1] and top_k(combine(cut, 0.3), 1).tolist() == [[0]]


@pytest.mark.parametrize("increasing", [True, False])
def test_in_pattern_finds_the_stored_pairs_searching_either_way(increasing):
    rng = np.random.default_rng(3)
    pattern = sp.random(30, 40, density=0.05, random_state=4, format="csr")  # fewer pairs than asked
    asked = sp.random(30, 40, density=0.5, random_state=8, format="csr")
    rows, cols = asked.nonzero()  # increasing row·L + col, the order the pattern's keys are searched in
    if not increasing:
        order = rng.permutation(rows.size)
        rows, cols = rows[order], cols[order]
    stored = set(zip(*pattern.nonzero()))
    expected = [(r, c) in stored for r, c in zip(rows, cols)]
    assert sum(expected) > 5 and in_pattern(rows, cols, pattern).tolist() == expected
