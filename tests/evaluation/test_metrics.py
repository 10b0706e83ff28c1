"""Metrics on small hand-worked examples, plus a cross-check against plain loops on random data."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

import oracle
from raexmc.data.stats import SEGMENTS, segment_of
from raexmc.errors import DataError
from raexmc.evaluation.metrics import macro_f1_by_segment, per_instance_metrics, summarize
from raexmc.evaluation.propensity import propensities
from raexmc.rae import pairs, ranking
from raexmc.rae.pairs import remove_pairs
from raexmc.rae.ranking import top_k


def csr(rows: list[dict[int, float]], width: int) -> sp.csr_matrix:
    """CSR from {label: value} per row; values stored even when 0.0, in the given order."""
    indptr, indices, data = [0], [], []
    for row in rows:
        indices += list(row)
        data += list(row.values())
        indptr.append(len(indices))
    arrays = (np.array(data, dtype=float), np.array(indices), np.array(indptr))
    return sp.csr_matrix(arrays, shape=(len(rows), width))


def labels(rows: list[set[int]], width: int) -> sp.csr_matrix:
    return csr([{label: 1.0 for label in sorted(row)} for row in rows], width)


TIED = np.array([[0.5, 0.9, 0.5, 0.1], [0.2, 0.2, 0.2, 0.2]])
SHORT = np.array([[0.1, 0.3, 0.2], [1.0, 2.0, 3.0]])
# unsorted indices on purpose (the 0.7 tie goes to label 1); a row with no candidate; stored zeros are candidates
SPARSE = csr([{4: 0.7, 3: 0.3, 1: 0.7}, {}, {2: 0.0, 5: -0.5, 0: 0.0}], 6)
ZEROS = np.array([[3.0, 1.0, 2.0, 2.0], [0.0, -1.0, 5.0, 0.0]])


@pytest.mark.parametrize(("scores", "k", "exclude", "expected"), [
    (TIED, 3, None, [[1, 0, 2], [0, 1, 2]]),                     # ties to the smaller label
    (TIED, 3, [{1}, {0}], [[0, 2, 3], [1, 2, 3]]),               # filtered pairs never
    (SHORT, 5, None, [[1, 2, 0, -1, -1], [2, 1, 0, -1, -1]]),    # k past the labels pads -1
    (SHORT, 5, [set(), {1, 2}], [[1, 2, 0, -1, -1], [0, -1, -1, -1, -1]]),
    (SPARSE, 3, None, [[1, 4, 3], [-1, -1, -1], [0, 2, 5]]),    # a sparse matrix's stored entries only
    (SPARSE, 3, [{1}, {3}, {0, 3}], [[4, 3, -1], [-1, -1, -1], [2, 5, -1]]),
    (sp.csr_matrix(ZEROS), 4, None, [[0, 2, 3, 1], [2, 1, -1, -1]]),  # csr_matrix(dense) stores no zeros
    (ZEROS, 4, None, [[0, 2, 3, 1], [2, 0, 3, 1]])])           # dense: every label, zeros before -1.0
def test_top_k_by_hand(scores, k, exclude, expected):
    assert top_k(scores, k, exclude=None if exclude is None else labels(exclude, scores.shape[1])).tolist() == expected


def test_top_k_rejects_exclude_of_other_shape_and_remove_pairs_drops_filtered_positives():
    with pytest.raises(DataError):
        top_k(np.zeros((2, 3)), 1, exclude=labels([set()], 3))
    truth = labels([{0, 2}, {1}], 4)
    exclude = labels([{2}, {3}], 4)  # (1, 3) is not a positive: nothing to drop there
    assert remove_pairs(truth, exclude).toarray().tolist() == [[1, 0, 0, 0], [0, 1, 0, 0]]


def test_filtered_pairs_work_through_chunks_of_rows_as_through_one(monkeypatch):
    """remove_pairs, and the rankings and metrics that drop filtered pairs, with a chunk of one to a few rows."""
    rng = np.random.default_rng(5)
    truth = sp.random(50, 30, density=0.3, random_state=rng, format="csr")
    exclude = sp.random(50, 30, density=0.2, random_state=rng, format="csr")
    scores = sp.random(50, 30, density=0.3, random_state=rng, format="csr")

    def run():
        ranked = top_k(scores, 4, exclude=exclude)
        return ranked, top_k(scores.toarray(), 4, exclude=exclude), per_instance_metrics(ranked, truth)

    whole = run()
    monkeypatch.setattr(pairs, "_CHUNK_ENTRIES", 7)
    kept = remove_pairs(truth, exclude)
    np.testing.assert_array_equal(kept.toarray(), np.where(exclude.toarray() != 0, 0.0, truth.toarray()))
    assert kept.nnz == ((truth.toarray() != 0) & (exclude.toarray() == 0)).sum()
    sparse_chunked, dense_chunked, metrics_chunked = run()
    assert sparse_chunked.tolist() == whole[0].tolist() and dense_chunked.tolist() == whole[1].tolist()
    for name, values in whole[2].items():
        assert metrics_chunked[name].tolist() == values.tolist(), name


def test_a_short_ranking_and_a_row_without_positives_score_as_the_oracle_says():
    """Positions past the ranking's 3 columns are misses, row 2 has no positive; PSP@k and PSnDCG@k per input are
    over the test set's mean ideal (pyxclib's ratio of means, 66.67 at PSP@1 where the mean of ratios is 50)."""
    ranked, truth = np.array([[0, 1, 2], [3, -1, -1], [0, 1, 2]]), labels([{0, 2, 5}, {3}, set()], 6)
    propensity = np.array([0.5, 1.0, 0.25, 0.5, 1.0, 0.8])
    assert_as_oracle(ranked, truth, (1, 3, 5), (1, 3), propensity)
    assert summarize(per_instance_metrics(ranked, truth, propensity=propensity))["PSP@1"] == 66.67


def test_no_positive_at_all_scores_0_and_a_label_past_the_last_is_refused():
    m = per_instance_metrics(np.array([[0], [1]]), labels([set(), set()], 2), ks=(1,), recall_ks=(),
                             propensity=np.array([0.5, 0.5]))
    assert m["PSP@1"].tolist() == m["PSnDCG@1"].tolist() == [0.0, 0.0], "propensity-scored, without positives"
    with pytest.raises(DataError):  # a ranked label that is none
        per_instance_metrics(np.array([[3]]), labels([{0}], 3))


def test_summarize_gives_rounded_percentages():
    assert summarize({"P@1": np.array([1.0, 0.0, 0.5]), "R@10": np.array([1 / 3] * 3)}) == {"P@1": 50.0, "R@10": 33.33}


def test_propensities_by_hand():
    # C = (ln 100 - 1) * 2.5^0.55 = 3.60517 * 1.65527 = 5.96750
    # p(0)  = 1 / (1 + 5.9675 * 1.5^-0.55)   = 1 / (1 + 5.9675 * 0.80014) = 0.17317
    # p(9)  = 1 / (1 + 5.9675 * 10.5^-0.55)  = 1 / (1 + 5.9675 * 0.27409) = 0.37917
    # p(99) = 1 / (1 + 5.9675 * 100.5^-0.55) = 1 / (1 + 5.9675 * 0.07931) = 0.67902
    p = propensities(np.array([0, 9, 99]), num_train=100, A=0.55, B=1.5)
    assert p == pytest.approx([0.17317, 0.37917, 0.67902], abs=5e-6)  # the hand values, to 5 decimals


def test_segment_bounds():
    assert list(SEGMENTS) == ["head", "torso", "tail", "xtail"]
    freq = np.array([0, 1, 10, 11, 100, 101, 1000, 1001])
    expected = ["unseen", "xtail", "xtail", "tail", "tail", "torso", "torso", "head"]
    assert segment_of(freq).tolist() == expected


def test_macro_f1_leaves_out_a_label_never_predicted_nor_relevant_and_an_empty_segment_is_nan():
    # labels: 0 head, 1 torso, 2 tail, 3 xtail, 4 unseen, 5 xtail but never predicted nor relevant
    ranked, truth = np.array([[0, 1], [0, 4], [3, -1]]), labels([{0, 2}, {4}, {0, 3}], 6)
    freq = np.array([2000, 500, 50, 5, 0, 3])
    f1 = assert_f1_as_oracle(ranked, truth, freq, 2)
    assert f1["xtail"] == 1.0, "label 5 left out: else xtail would be 0.5"
    assert math.isnan(assert_f1_as_oracle(ranked, truth, freq, 1)["torso"]), "label 1 is not in any top 1"


def reference_top_k(scores, k, exclude):
    """The oracle's ranking of each row, cut at k and padded with -1."""
    banned = {(int(i), int(label)) for i, label in zip(*exclude.nonzero())}
    return [(oracle.ranking(scores, i, banned) + [-1] * k)[:k] for i in range(scores.shape[0])]


def truth_and_rankings(ranked, truth):
    return [set(truth[i].indices.tolist()) for i in range(truth.shape[0])], [[label for label in row if label >= 0]
                                                                                for row in ranked.tolist()]


def assert_as_oracle(ranked, truth, ks, recall_ks, propensity=None):
    """Every per-input metric of `ranked` is the oracle's (PSP@k and PSnDCG@k too, given propensities)."""
    got = per_instance_metrics(ranked, truth, ks, recall_ks, propensity)
    want = oracle.per_input(*truth_and_rankings(ranked, truth)[::-1], None if propensity is None else 1 / propensity,
                            ks, recall_ks)
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-12, err_msg=name)


def assert_f1_as_oracle(ranked, truth, freq, k):
    """Macro-F1@k per segment is the oracle's, NaN where it has no label; returns it."""
    got = macro_f1_by_segment(ranked, truth, freq, k=k)
    want = oracle.macro_f1(*truth_and_rankings(ranked, truth)[::-1], freq, k=k)
    assert got.keys() == want.keys()
    for name, value in got.items():
        assert math.isnan(value) if want[name] is None else value == pytest.approx(want[name], abs=1e-9), name
    return got


@pytest.mark.parametrize("sparse", [False, True])
def test_matches_reference_loops_on_random_data(sparse):
    rng = np.random.default_rng(7)
    n, width, k = 60, 40, 12
    # Scores on a coarse grid so ties are frequent.
    scores = rng.integers(0, 6, size=(n, width)).astype(float)
    if sparse:
        scores = sp.random(n, width, density=0.2, random_state=rng, format="csr")
        scores.data = np.round(scores.data * 4)  # includes stored zeros
    exclude = sp.random(n, width, density=0.05, random_state=rng, format="csr")
    truth = sp.random(n, width, density=0.1, random_state=rng, format="csr")
    truth = remove_pairs(truth, exclude)
    freq = rng.choice([0, 3, 10, 50, 500, 5000], size=width)

    ranked = top_k(scores, k, exclude=exclude)
    assert ranked.tolist() == reference_top_k(scores, k, exclude)

    assert_as_oracle(ranked, truth, (1, 3, 5), (10, 15))
    assert_f1_as_oracle(ranked, truth, freq, 5)


@pytest.mark.parametrize("sparse", [False, True])
def test_propensity_scored_metrics_match_pyxclib_semantics_on_random_data(sparse):
    rng = np.random.default_rng(11)
    n, width = 80, 25
    truth = sp.random(n, width, density=0.15, random_state=rng, format="csr")  # some rows empty
    scores = rng.random((n, width)) + 0.6 * (truth.toarray() != 0)  # better than chance
    if sparse:  # few candidates: rankings padded with -1
        scores = sp.csr_matrix(scores * (rng.random((n, width)) < 0.3))
    freq = rng.choice([0, 2, 10, 50, 500], size=width)
    propensity = propensities(freq, num_train=5_000)
    ks = (1, 3, 5)
    ranked = top_k(scores, 8)
    got = per_instance_metrics(ranked, truth, ks, recall_ks=(), propensity=propensity)
    positives, rankings = truth_and_rankings(ranked, truth)
    for k in ks:
        for name, (numerators, ideals) in oracle.propensity_scored(rankings, positives, 1 / propensity, k).items():
            key = f"{name}@{k}"
            value = np.mean(numerators) / np.mean(ideals)
            assert np.mean(got[key]) == pytest.approx(value, abs=1e-9), key
            assert summarize(got)[key] == round(100 * value, 2), key
            # The per-input values t-tests see: pyxclib's per-input numerators over the mean ideal.
            np.testing.assert_allclose(got[key], np.array(numerators) / np.mean(ideals), rtol=0, atol=1e-9,
                                       err_msg=key)
            mean_of_ratios = np.mean(np.divide(numerators, ideals, out=np.zeros(n), where=np.array(ideals) > 0))
            assert abs(mean_of_ratios - value) > 1e-3, f"{key}: the data does not tell the definitions apart"


@pytest.mark.parametrize("pad_limit", [0, 4, 1000])
def test_every_sorting_path_matches_the_reference(monkeypatch, pad_limit):
    """0: no row is padded, every candidate is sorted together; 1000: every row is padded and sorted on its
    own, its widest rows included; 4: the default, where the sparse scores here (rows of 0 to 60 candidates, one
    of 300) take the joint sort and the dense ones the padded; most rows hold more than k, tied at the k-th."""
    monkeypatch.setattr(ranking, "_PAD_LIMIT", pad_limit)
    rng = np.random.default_rng(5)
    n, width, k = 60, 300, 7
    dense = np.zeros((n, width))
    for i in range(n):
        cols = rng.choice(width, size=300 if i == 3 else rng.integers(0, 60), replace=False)
        dense[i, cols] = rng.integers(0, 5, size=cols.size) / 5 - 0.5  # ties everywhere, negative scores too
    scores = sp.csr_matrix(dense)
    exclude = sp.random(n, width, density=0.1, random_state=rng, format="csr")
    assert (np.diff(scores.indptr) > k).sum() > n // 2
    assert top_k(scores, k, exclude=exclude).tolist() == reference_top_k(scores, k, exclude)
    assert top_k(dense, k, exclude=exclude).tolist() == reference_top_k(dense, k, exclude)


@pytest.mark.parametrize("pad_limit", [0, 4, 1000])
@pytest.mark.parametrize("sparse", [False, True])
def test_nan_ranks_as_minus_infinity_on_every_path(monkeypatch, pad_limit, sparse):
    """Hand-worked: NaN ranks last, tied with -inf and broken by label; k beyond a row's candidates pads -1."""
    monkeypatch.setattr(ranking, "_PAD_LIMIT", pad_limit)
    nan, inf = float("nan"), float("inf")
    scores = np.array([[0.5, nan, 0.2, 0.1, 0.7],
                       [0.9, 0.1, 0.3, inf, -inf],
                       [nan, -inf, 0.1, nan, nan]])
    scores = sp.csr_matrix(scores) if sparse else scores
    assert top_k(scores, 2).tolist() == [[4, 0], [3, 0], [2, 0]]
    assert top_k(scores, 6).tolist() == [[4, 0, 2, 3, 1, -1], [3, 0, 2, 1, 4, -1], [2, 0, 1, 3, 4, -1]]
    short = sp.csr_matrix(np.array([[0.5, nan, 0, 0], [0.9, 0.1, 0.3, 0]]))  # narrower than the widest row
    assert top_k(short, 3).tolist() == [[0, 1, -1], [0, 2, 1]]
