"""RAE-XMC scoring from retrieved keys: hand-worked examples, then cross-checks on random data
against plain loops and a dense brute-force search over the whole knowledge memory."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from raexmc.errors import DataError
from raexmc.rae.scoring import (
    combine,
    combine_per_query,
    dual_encoder_scores,
    key_probabilities,
    knn_scores,
    ova_knn_scores,
    rae_scores,
    score_parts,
    train_key_counts,
)
from tests.helpers import dense_top_b_softmax, unit_rows

# With tau = 1 / ln 2, exp(s / tau) = 2 ** s, so integer similarities give power-of-two weights.
TAU2 = 1.0 / math.log(2.0)
NEG = -np.inf

# Memory of the hand examples: N = 2 training inputs (key ids 0, 1), L = 3 labels (key ids 2, 3, 4).
# Training input 0 has labels {0, 2}, training input 1 has label {1}.
Y_HAND = sp.csr_matrix(np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]))
IDS_HAND = np.array([[2, 0, 4, -1], [1, 3, 0, 2], [-1, -1, -1, -1]], dtype=np.int64)
SIMS_HAND = np.array([[2, 1, 0, NEG], [1, 1, 0, -1], [NEG, NEG, NEG, NEG]], dtype=np.float32)


# --------------------------------------------------------------------------- hand-worked examples


def test_key_probabilities_hand_example():
    p = key_probabilities(SIMS_HAND, IDS_HAND, TAU2, num_keys=5).toarray()
    # Row 0: weights 2^2, 2^1, 2^0 = 4, 2, 1 (sum 7) on keys 2, 0, 4; the -1 pad is ignored.
    # Row 1: weights 2, 2, 1, 1/2 (sum 5.5) on keys 1, 3, 0, 2 -> 4/11, 4/11, 2/11, 1/11.
    # Row 2: no valid key -> all zero.
    expected = np.array([
        [2 / 7, 0.0, 4 / 7, 0.0, 1 / 7],
        [2 / 11, 4 / 11, 1 / 11, 4 / 11, 0.0],
        [0.0, 0.0, 0.0, 0.0, 0.0],
    ])
    np.testing.assert_allclose(p, expected, rtol=0, atol=1e-9)


def test_key_probabilities_shape_and_format():
    p = key_probabilities(SIMS_HAND, IDS_HAND, TAU2, num_keys=5)
    assert sp.isspmatrix_csr(p) and p.shape == (3, 5)
    assert p.has_canonical_format
    assert p.nnz == 3 + 4  # only the valid retrieved keys are stored


def test_rae_scores_hand_example():
    scores = rae_scores(IDS_HAND, SIMS_HAND, Y_HAND, lam=0.5, tau=TAU2)
    assert sp.isspmatrix_csr(scores) and scores.shape == (3, 3)
    # Row 0: kNN part = 2/7 * Y[0] = [2/7, 0, 2/7]; label part = [4/7, 0, 1/7] (keys 2 -> label 0,
    #        4 -> label 2); 0.5 * [6/7, 0, 3/7] = [3/7, 0, 3/14].
    # Row 1: kNN part = 4/11 * Y[1] + 2/11 * Y[0] = [2/11, 4/11, 2/11];
    #        label part = [1/11, 4/11, 0] (keys 2 -> label 0, 3 -> label 1);
    #        0.5 * [3/11, 8/11, 2/11] = [3/22, 4/11, 1/11].
    expected = np.array([[3 / 7, 0.0, 3 / 14], [3 / 22, 4 / 11, 1 / 11], [0.0, 0.0, 0.0]])
    np.testing.assert_allclose(scores.toarray(), expected, rtol=0, atol=1e-9)


def test_rae_scores_hand_example_lambda_ends():
    knn = rae_scores(IDS_HAND, SIMS_HAND, Y_HAND, lam=1.0, tau=TAU2).toarray()
    dual = rae_scores(IDS_HAND, SIMS_HAND, Y_HAND, lam=0.0, tau=TAU2).toarray()
    # The kNN and label parts of test_rae_scores_hand_example, each with the full normaliser.
    np.testing.assert_allclose(knn, [[2 / 7, 0, 2 / 7], [2 / 11, 4 / 11, 2 / 11], [0, 0, 0]], rtol=0, atol=1e-9)
    np.testing.assert_allclose(dual, [[4 / 7, 0, 1 / 7], [1 / 11, 4 / 11, 0], [0, 0, 0]], rtol=0, atol=1e-9)
    # lam = 0 stores only labels reached through label keys: row 1 reaches label 2 only through
    # training key 0, so it is not stored; row 0 stores labels 0 and 2, row 1 labels 0 and 1.
    stored = rae_scores(IDS_HAND, SIMS_HAND, Y_HAND, lam=0.0, tau=TAU2)
    assert [list(stored[i].indices) for i in range(3)] == [[0, 2], [0, 1], []]


def test_b_smaller_than_retrieved_width():
    scores = rae_scores(IDS_HAND, SIMS_HAND, Y_HAND, lam=0.5, tau=TAU2, b=2).toarray()
    # Row 0 keeps keys 2, 0 with weights 4, 2 -> 2/3, 1/3: kNN [1/3, 0, 1/3], label [2/3, 0, 0]
    #        -> 0.5 * [1, 0, 1/3] = [1/2, 0, 1/6].
    # Row 1 keeps keys 1, 3 with weights 2, 2 -> 1/2 each: kNN [0, 1/2, 0], label [0, 1/2, 0]
    #        -> [0, 1/2, 0].
    expected = np.array([[1 / 2, 0.0, 1 / 6], [0.0, 1 / 2, 0.0], [0.0, 0.0, 0.0]])
    np.testing.assert_allclose(scores, expected, rtol=0, atol=1e-9)
    # b = 1 is the single best key: row 0 -> label key 2 (label 0) with p = 1 -> 0.5 on label 0.
    top1 = rae_scores(IDS_HAND, SIMS_HAND, Y_HAND, lam=0.5, tau=TAU2, b=1).toarray()
    np.testing.assert_allclose(top1[0], [0.5, 0.0, 0.0], rtol=0, atol=1e-9)
    # b at or above the width changes nothing.
    full = rae_scores(IDS_HAND, SIMS_HAND, Y_HAND, lam=0.5, tau=TAU2).toarray()
    for b in (4, 100):
        np.testing.assert_allclose(rae_scores(IDS_HAND, SIMS_HAND, Y_HAND, 0.5, TAU2, b=b).toarray(), full, rtol=0,
                                   atol=1e-9)


def test_padding_anywhere_is_ignored_and_b_counts_valid_keys():
    # A -1 id (whatever its sim) and a -inf sim are both padding, even in the middle of a row.
    ids = np.array([[2, -1, 0, 4, 3]], dtype=np.int64)
    sims = np.array([[2, 5, NEG, 1, 0]], dtype=np.float32)
    p = key_probabilities(sims, ids, TAU2, num_keys=5).toarray()
    # Valid: key 2 (2^2 = 4), key 4 (2^1 = 2), key 3 (2^0 = 1); sum 7.
    np.testing.assert_allclose(p, [[0, 0, 4 / 7, 1 / 7, 2 / 7]], rtol=0, atol=1e-9)
    # b = 2 keeps the first two valid keys, 2 and 4: 4/6 and 2/6.
    p2 = key_probabilities(sims, ids, TAU2, num_keys=5, b=2).toarray()
    np.testing.assert_allclose(p2, [[0, 0, 2 / 3, 0, 1 / 3]], rtol=0, atol=1e-9)


def test_all_padding_and_empty_batch():
    ids = np.full((2, 3), -1, dtype=np.int64)
    sims = np.full((2, 3), NEG, dtype=np.float32)
    scores = rae_scores(ids, sims, Y_HAND, lam=0.5, tau=0.04)
    assert scores.shape == (2, 3) and scores.nnz == 0
    empty = rae_scores(np.zeros((0, 4), np.int64), np.zeros((0, 4), np.float32), Y_HAND, 0.5, 0.04)
    assert empty.shape == (0, 3)
    assert train_key_counts(ids, num_train=2).tolist() == [0, 0]


def test_large_tau_gives_uniform_weights():
    ids = np.array([[3, 0, 1, 4, -1]], dtype=np.int64)
    sims = np.array([[0.9, 0.5, -0.3, -0.8, NEG]], dtype=np.float32)
    p = key_probabilities(sims, ids, tau=1e9, num_keys=5).toarray()
    np.testing.assert_allclose(p, [[1 / 4, 1 / 4, 0, 1 / 4, 1 / 4]], rtol=0, atol=1e-9)
    # Scores then weigh each of the 4 keys 1/4: kNN = (Y[0] + Y[1]) / 4 = [1/4, 1/4, 1/4],
    # labels = keys 3, 4 -> labels 1, 2 at 1/4 each; lam = 0.5 -> [1/8, 1/4, 1/4].
    scores = rae_scores(ids, sims, Y_HAND, lam=0.5, tau=1e9).toarray()
    np.testing.assert_allclose(scores, [[1 / 8, 1 / 4, 1 / 4]], rtol=0, atol=1e-9)


def test_tiny_tau_is_stable():
    # sims / tau ~ 1e6: without subtracting the row max exp would overflow to inf.
    ids = np.array([[2, 0]], dtype=np.int64)
    sims = np.array([[0.9, 0.8]], dtype=np.float32)
    p = key_probabilities(sims, ids, tau=1e-6, num_keys=5).toarray()
    assert np.all(np.isfinite(p))
    np.testing.assert_allclose(p, [[0, 0, 1, 0, 0]], rtol=0, atol=1e-9)


def test_train_key_counts_hand_example():
    # num_train = 2: ids 0, 1 are training inputs, larger ids are labels.
    ids = np.array([[0, 5, 1, -1], [4, 3, -1, -1]], dtype=np.int64)
    # All keys: row 0 has 0, 5, 1 (2 train), row 1 has 4, 3 (0 train) -> 2 of 5.
    assert train_key_counts(ids, num_train=2).tolist() == [2, 5]
    # b = 1: keys 0 (train) and 4 (label) -> 1 of 2.
    assert train_key_counts(ids, num_train=2, b=1).tolist() == [1, 2]
    # b = 2: keys 0, 5 and 4, 3 -> 1 train of 4.
    assert train_key_counts(ids, num_train=2, b=2).tolist() == [1, 4]


def test_train_key_counts_the_first_label_key_is_not_a_training_input():
    # num_train = 2: id 2 is the first label key (ids < 2 are inputs), so 2 of the 3 keys are training inputs.
    ids = np.array([[2, 1, 0]], dtype=np.int64)
    assert train_key_counts(ids, num_train=2).tolist() == [2, 3]
    assert train_key_counts(ids, num_train=2, b=1).tolist() == [0, 1]


def test_baselines_hand_example():
    # Label-only search of one query: labels 2 and 0 at similarities 1 and 0 -> weights 2/3, 1/3.
    de = dual_encoder_scores(np.array([[2, 0, -1]]), np.array([[1, 0, NEG]], np.float32), 3, tau=TAU2)
    np.testing.assert_allclose(de.toarray(), [[1 / 3, 0, 2 / 3]], rtol=0, atol=1e-9)
    # Input-only search: inputs 1 and 0 at similarities 2 and 0 -> weights 4/5, 1/5; input 0 has
    # labels {0, 2}, input 1 has label {1}.
    knn = knn_scores(np.array([[1, 0]]), np.array([[2, 0]], np.float32), Y_HAND, tau=TAU2)
    np.testing.assert_allclose(knn.toarray(), [[1 / 5, 4 / 5, 1 / 5]], rtol=0, atol=1e-9)


# --------------------------------------------------------------------------- invalid input


ONE_KEY, ONE_SIM = np.zeros((1, 1), np.int64), np.zeros((1, 1), np.float32)
BAD_CALLS = [  # (what a call is handed, the setting its ValueError names, the calls)
    *((lam, "infer.lambda", (lambda v: rae_scores(IDS_HAND, SIMS_HAND, Y_HAND, lam=v, tau=0.04),
                             lambda v: combine(score_parts(IDS_HAND, SIMS_HAND, Y_HAND, tau=0.04), v),
                             lambda v: ova_knn_scores(ONE_KEY, ONE_SIM, ONE_KEY, ONE_SIM, Y_HAND, v, 0.04)))
      for lam in (-0.01, 1.01, float("nan"), "half")),
    *((tau, "infer.tau", (lambda v: rae_scores(IDS_HAND, SIMS_HAND, Y_HAND, lam=0.5, tau=v),
                          lambda v: key_probabilities(SIMS_HAND, IDS_HAND, v, num_keys=5)))
      for tau in (0.0, -0.04, float("nan"), float("inf"))),
    *((b, "infer.b", (lambda v: rae_scores(IDS_HAND, SIMS_HAND, Y_HAND, lam=0.5, tau=0.04, b=v),))
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
        rae_scores(IDS_HAND, SIMS_HAND[:, :3], Y_HAND, 0.5, 0.04)
    with pytest.raises(DataError, match="nan"):
        rae_scores(IDS_HAND, np.where(IDS_HAND == 0, np.nan, SIMS_HAND), Y_HAND, 0.5, 0.04)
    with pytest.raises(DataError, match="outside the memory"):
        knn_scores(np.array([[2]]), np.array([[1.0]], np.float32), Y_HAND)  # only inputs 0 and 1 exist


# --------------------------------------------------------------------------- random cross-checks


def _search(queries: np.ndarray, keys: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-`width` search, padded with -1 / -inf where there are fewer keys."""
    sims = (queries @ keys.T).astype(np.float32)
    order = np.argsort(-sims, axis=1, kind="stable")[:, :width]
    top = np.take_along_axis(sims, order, axis=1)
    pad = width - order.shape[1]
    ids = np.pad(order.astype(np.int64), ((0, 0), (0, pad)), constant_values=-1)
    return ids, np.pad(top, ((0, 0), (0, pad)), constant_values=NEG)


@pytest.fixture(scope="module")
def memory():
    rng = np.random.default_rng(7)
    n_train, n_labels, n_query, dim = 40, 15, 9, 6
    X, Z, Q = (unit_rows(rng, n, dim, np.float64) for n in (n_train, n_labels, n_query))
    Y = sp.random(n_train, n_labels, density=0.2, random_state=3, format="csr")
    Y.data[:] = 1.0
    ids, sims = _search(Q, np.vstack([X, Z]), width=30)
    ids[2, 20:], sims[2, 20:] = -1, NEG  # one query got fewer results back from its index
    return {"X": X, "Z": Z, "Q": Q, "Y": Y, "ids": ids, "sims": sims}


def _loop_probabilities(ids: np.ndarray, sims: np.ndarray, tau: float, b: int | None) -> list[list[tuple[int, float]]]:
    """Per query, (key id, softmax weight) of its first b valid keys, one key at a time."""
    out = []
    for row_ids, row_sims in zip(ids, sims):
        valid = [(int(i), float(s)) for i, s in zip(row_ids, row_sims) if i >= 0 and s > -np.inf]
        valid = valid[:b] if b is not None else valid
        top = max((s for _, s in valid), default=0.0)
        weights = [(i, math.exp((s - top) / tau)) for i, s in valid]
        total = sum(w for _, w in weights)
        out.append([(i, w / total) for i, w in weights])
    return out


@pytest.mark.parametrize("lam", [0.0, 1.0])
@pytest.mark.parametrize("tau", [0.04, 0.3])
@pytest.mark.parametrize("b", [None, 3, 17])
def test_lambda_zero_and_one_are_the_dual_encoder_and_knn_formulas(memory, lam, tau, b):
    Y = memory["Y"].toarray()
    n_train = Y.shape[0]
    expected = np.zeros((memory["ids"].shape[0], Y.shape[1]))
    for q, row in enumerate(_loop_probabilities(memory["ids"], memory["sims"], tau, b)):
        for key, p in row:  # λ = 0: p on a label key's label; λ = 1: sum_j p_j * Y[j] over the training inputs
            if key >= n_train:
                expected[q, key - n_train] += (1 - lam) * p
            else:
                expected[q] += lam * p * Y[key]
    got = rae_scores(memory["ids"], memory["sims"], memory["Y"], lam=lam, tau=tau, b=b)
    np.testing.assert_allclose(got.toarray(), expected, rtol=1e-9, atol=1e-12)


def _dense_rae(Q, X, Z, Y, lam, tau, b):
    """Brute force over the whole memory: q K^T, top-b, softmax, times the dense values V."""
    K = np.vstack([X, Z])
    P = dense_top_b_softmax(Q @ K.T, b, tau)
    V = np.vstack([lam * Y.toarray(), (1.0 - lam) * np.eye(Z.shape[0])])
    return P @ V


@pytest.mark.parametrize("tau", [0.04, 0.2, 1.0])
@pytest.mark.parametrize("b", [1, 5, 30])
def test_rae_scores_match_dense_brute_force(memory, tau, b):
    m = memory
    keep = np.arange(m["Q"].shape[0]) != 2  # query 2 had truncated results
    ids, sims = m["ids"][keep], m["sims"][keep]
    for lam in (0.0, 0.25, 0.5, 0.9, 1.0):
        expected = _dense_rae(m["Q"][keep], m["X"], m["Z"], m["Y"], lam, tau, b)
        got = rae_scores(ids, sims, m["Y"], lam=lam, tau=tau, b=b)
        np.testing.assert_allclose(got.toarray(), expected, rtol=1e-9, atol=1e-12)
        # Stored entries are exactly the labels with a nonzero score.
        assert got.nnz == np.count_nonzero(got.toarray())


def test_parts_combine_linearly_and_probabilities_sum_to_one(memory):
    m = memory
    knn, labels = score_parts(m["ids"], m["sims"], m["Y"], 0.04, 10)
    for lam in (0.1, 0.5):
        np.testing.assert_allclose(combine((knn, labels), lam).toarray(), (lam * knn + (1 - lam) * labels).toarray(),
                                   rtol=0, atol=1e-12)
    P = key_probabilities(m["sims"], m["ids"], 0.04, m["X"].shape[0] + m["Z"].shape[0], 10)
    np.testing.assert_allclose(np.asarray(P.sum(axis=1)).ravel(), 1.0, rtol=0, atol=1e-12)


def test_per_query_lambda_matches_a_dense_loop_over_queries(memory):
    m = memory
    keep = np.arange(m["Q"].shape[0]) != 2  # query 2 had truncated results
    Q, ids, sims = m["Q"][keep], m["ids"][keep], m["sims"][keep]
    lams = np.array([0.0, 1.0, 0.25, 0.5, 0.9, 0.01, 0.7, 1.0])
    got = combine_per_query(score_parts(ids, sims, m["Y"], 0.2, 5), lams)
    expected = np.vstack([_dense_rae(Q[q:q + 1], m["X"], m["Z"], m["Y"], lam, 0.2, 5) for q, lam in enumerate(lams)])
    np.testing.assert_allclose(got.toarray(), expected, rtol=1e-9, atol=1e-12)
    assert got.nnz == np.count_nonzero(expected)  # lam = 0 or 1 leaves no stored zeros behind


def test_per_query_combine_with_a_scalar_is_combine(memory):
    parts = score_parts(memory["ids"], memory["sims"], memory["Y"], 0.04, 10)
    for lam in (0.0, 0.3, 1.0):
        got, today = combine_per_query(parts, lam), combine(parts, lam)
        for name in ("indptr", "indices", "data"):
            np.testing.assert_array_equal(getattr(got, name), getattr(today, name))


def test_per_query_lambdas_are_checked(memory):
    parts = score_parts(memory["ids"], memory["sims"], memory["Y"], 0.04, 10)
    n = memory["ids"].shape[0]
    for bad in (np.full(n - 1, 0.5), np.full(n, 1.5), np.full(n, np.nan)):
        with pytest.raises(DataError, match="per-query lambdas"):
            combine_per_query(parts, bad)


@pytest.mark.parametrize("lam", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("b", [None, 4])
def test_ova_knn_scores_match_dense_reference(memory, lam, b):
    m = memory
    tau = 0.05
    x_ids, x_sims = _search(m["Q"], m["X"], width=12)
    z_ids, z_sims = _search(m["Q"], m["Z"], width=20)  # wider than L = 15: padded
    got = ova_knn_scores(x_ids, x_sims, z_ids, z_sims, m["Y"], lam=lam, tau=tau, b=b)

    bx = 12 if b is None else b
    bz = m["Z"].shape[0] if b is None else b
    expected = lam * dense_top_b_softmax(m["Q"] @ m["X"].T, bx, tau) @ m["Y"].toarray() + (
        1 - lam) * dense_top_b_softmax(m["Q"] @ m["Z"].T, bz, tau)
    np.testing.assert_allclose(got.toarray(), expected, rtol=1e-9, atol=1e-12)


def test_ova_differs_from_joint_softmax(memory):
    # The joint memory normalises over both kinds of keys together, OvA+kNN over each separately.
    m = memory
    x_ids, x_sims = _search(m["Q"], m["X"], width=40)
    z_ids, z_sims = _search(m["Q"], m["Z"], width=15)
    ova = ova_knn_scores(x_ids, x_sims, z_ids, z_sims, m["Y"], lam=0.5, tau=0.04)
    ids, sims = _search(m["Q"], np.vstack([m["X"], m["Z"]]), width=55)
    joint = rae_scores(ids, sims, m["Y"], lam=0.5, tau=0.04)
    assert not np.allclose(ova.toarray(), joint.toarray(), rtol=0, atol=1e-6)
