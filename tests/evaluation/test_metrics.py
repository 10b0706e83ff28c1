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

# Discounts 1/log2(j + 1) for positions j = 1, 2, 3.
D1, D2, D3 = 1.0, 0.6309297535714575, 0.5


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


def test_filtered_pair_neither_predicted_nor_positive():
    # Label 0 is the input's reciprocal pair: it would be the top prediction and a positive.
    scores = np.array([[0.9, 0.8, 0.1, 0.05]])
    truth = labels([{0, 2}], 4)
    exclude = labels([{0}], 4)
    ranked = top_k(scores, 3, exclude=exclude)
    assert ranked.tolist() == [[1, 2, 3]]
    m = per_instance_metrics(ranked, remove_pairs(truth, exclude), ks=(1, 3), recall_ks=(3,))
    # Truth is {2} after filtering, hit at position 2 only.
    assert m["P@1"].tolist() == [0.0]
    assert m["P@3"] == pytest.approx([1 / 3], abs=1e-9)
    assert m["nDCG@3"] == pytest.approx([D2 / D1], abs=1e-9)  # DCG = 1/log2(3), IDCG = 1 (one positive)
    assert m["R@3"].tolist() == [1.0]


@pytest.fixture
def worked_example():
    truth = labels([{0, 2, 5}, {3}, set()], 6)  # row 2 has no positive
    # Only 3 columns: positions 4 and 5 count as misses for @5.
    ranked = np.array([[0, 1, 2], [3, -1, -1], [0, 1, 2]])
    # 1/p = [2, 1, 4, 2, 1, 1.25]
    propensity = np.array([0.5, 1.0, 0.25, 0.5, 1.0, 0.8])
    return ranked, truth, propensity


def test_precision_ndcg_recall_by_hand(worked_example):
    ranked, truth, _ = worked_example
    m = per_instance_metrics(ranked, truth, ks=(1, 3, 5), recall_ks=(1, 3))
    # hits: row 0 [1, 0, 1], row 1 [1, -, -], row 2 none.
    assert m["P@1"] == pytest.approx([1, 1, 0], abs=1e-9)
    assert m["P@3"] == pytest.approx([2 / 3, 1 / 3, 0], abs=1e-9)
    assert m["P@5"] == pytest.approx([2 / 5, 1 / 5, 0], abs=1e-9)
    # row 0: DCG@1 = 1 = IDCG@1; DCG@3 = DCG@5 = 1 + 0.5;
    # IDCG@3 = IDCG@5 = 1 + 0.6309 + 0.5 (3 positives)
    # -> 1.5 / 2.1309297535714575 = 0.7039180890341347. row 1: one positive at rank 1 -> 1.
    assert m["nDCG@1"] == pytest.approx([1, 1, 0], abs=1e-9)
    assert m["nDCG@3"] == pytest.approx([0.7039180890341347, 1, 0], abs=1e-9)
    assert m["nDCG@5"] == pytest.approx([0.7039180890341347, 1, 0], abs=1e-9)
    # row 0 has 3 positives, row 1 one, row 2 none (divided by 1, still 0).
    assert m["R@1"] == pytest.approx([1 / 3, 1, 0], abs=1e-9)
    assert m["R@3"] == pytest.approx([2 / 3, 1, 0], abs=1e-9)
    assert "PSP@1" not in m


def test_psp_and_psndcg_are_ratios_of_means_over_the_test_set(worked_example):
    """pyxclib's psprecision: mean of propensity-scored hits over mean of the best achievable; psndcg: mean of
    PSDCG/IDCG over mean of best PSDCG/IDCG, IDCG with unit gains."""
    ranked, truth, propensity = worked_example
    m = per_instance_metrics(ranked, truth, ks=(1, 3, 5), recall_ks=(), propensity=propensity)
    # Weights 1/p: row 0's positives {0: 2, 2: 4, 5: 1.25}, row 1's {3: 2}, row 2 has none.
    # Gains of the rankings: row 0 [0, 1, 2] -> [2, 0, 4]; row 1 [3] -> [2]; row 2 -> nothing.
    # k = 1: gains [2, 2, 0], best [4, 2, 0] -> PSP@1 = (4/3) / (6/3) = 2/3.
    #   (The mean of per-input ratios would be (2/4 + 2/2 + 0) / 3 = 0.5.)
    # k = 3 (and 5: no more hits, no more positives): gains [6, 2, 0], best [7.25, 2, 0]
    #   -> PSP@3 = 8 / 9.25 = 0.8648648648648649 (mean of ratios: (6/7.25 + 1 + 0)/3 = 0.6092).
    # Per input: the gain over the mean best, so the plain mean is the ratio of means:
    #   k = 1: mean best 2 -> [1, 1, 0];  k = 3: mean best 9.25/3 -> [6, 2, 0] * 3/9.25.
    assert m["PSP@1"] == pytest.approx([1, 1, 0], abs=1e-9)
    assert m["PSP@3"] == pytest.approx([1.9459459459459458, 0.6486486486486486, 0], abs=1e-9)
    assert m["PSP@5"] == pytest.approx(m["PSP@3"], abs=1e-9)
    summary = summarize(m)
    assert summary["PSP@1"] == 66.67
    assert summary["PSP@3"] == summary["PSP@5"] == 86.49
    # k = 1: IDCG@1 = 1 for rows 0 and 1; PSDCG [2, 2, 0], best [4, 2, 0] -> 4/6, per input [1, 1, 0].
    # k = 3: row 0: IDCG@3 = D1 + D2 + D3 = 2.1309297535714578 (3 positives);
    #   PSDCG = 2*D1 + 4*D3 = 4 -> 4 / 2.1309297535714578 = 1.8771149040910258;
    #   best = 4*D1 + 2*D2 + 1.25*D3 = 5.8868595071429155 -> / IDCG = 2.7625779297869792.
    #   row 1: IDCG@3 = 1 (one positive); PSDCG = best = 2. row 2: 0.
    #   PSnDCG@3 = (1.8771149 + 2) / (2.7625779 + 2) = 0.8140790473667779 (mean of ratios: 0.5598);
    #   mean best = 4.7625779297869792 / 3 = 1.5875259765956597
    #   -> per input [1.8771149 / 1.5875260, 2 / 1.5875260, 0] = [1.1824152, 1.2598219, 0].
    assert m["PSnDCG@1"] == pytest.approx([1, 1, 0], abs=1e-9)
    assert m["PSnDCG@3"] == pytest.approx([1.1824152371455172, 1.2598219049548167, 0], abs=1e-9)
    assert summarize(m)["PSnDCG@3"] == 81.41


def test_k_larger_than_number_of_labels_and_no_positive_at_all():
    m = per_instance_metrics(np.array([[0], [1]]), labels([set(), set()], 2), ks=(1,), recall_ks=(),
                             propensity=np.array([0.5, 0.5]))
    assert m["PSP@1"].tolist() == m["PSnDCG@1"].tolist() == [0.0, 0.0], "propensity-scored, without positives"
    truth = labels([{0, 1, 2}], 3)
    ranked = top_k(np.array([[0.3, 0.2, 0.1]]), 5)
    m = per_instance_metrics(ranked, truth, ks=(5,), recall_ks=(5,))
    assert m["P@5"].tolist() == [3 / 5]  # at most 3 hits in 5 slots
    assert m["nDCG@5"] == pytest.approx([1.0], abs=1e-9)  # IDCG over min(5, 3) positions
    assert m["R@5"].tolist() == [1.0]
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


@pytest.fixture
def f1_example():
    # labels: 0 head, 1 torso, 2 tail, 3 xtail, 4 unseen, 5 xtail but never predicted nor relevant
    freq = np.array([2000, 500, 50, 5, 0, 3])
    ranked = np.array([[0, 1], [0, 4], [3, -1]])
    truth = labels([{0, 2}, {4}, {0, 3}], 6)
    return ranked, truth, freq


def test_macro_f1_by_segment_top2_and_top1_leaves_an_empty_segment_nan(f1_example):
    ranked, truth, freq = f1_example
    # label 0: predicted for rows 0, 1; relevant for rows 0, 2 -> TP 1, FP 1, FN 1 -> 2/4 = 0.5
    # label 1: FP 1 -> 0.  label 2: FN 1 -> 0.  label 3: TP 1 -> 1.  label 4: TP 1 -> 1.
    # label 5: TP + FP + FN = 0 -> left out (else xtail would be 0.5).
    f1 = macro_f1_by_segment(ranked, truth, freq, k=2)
    assert f1 == {"head": 0.5, "torso": 0.0, "tail": 0.0, "xtail": 1.0, "unseen": 1.0, "all": 0.5}
    # top 1: [0], [0], [3]. label 0 as before 0.5; label 1 not counted -> torso nan;
    # label 2 FN -> 0; label 3 TP -> 1; label 4 FN -> 0 (unseen); all = (0.5 + 0 + 1 + 0) / 4.
    f1 = macro_f1_by_segment(ranked, truth, freq, k=1)
    assert math.isnan(f1.pop("torso"))
    assert f1 == {"head": 0.5, "tail": 0.0, "xtail": 1.0, "unseen": 0.0, "all": 0.375}


def reference_top_k(scores, k, exclude):
    """The oracle's ranking of each row, cut at k and padded with -1."""
    banned = {(int(i), int(label)) for i, label in zip(*exclude.nonzero())}
    return [(oracle.ranking(scores, i, banned) + [-1] * k)[:k] for i in range(scores.shape[0])]


def truth_and_rankings(ranked, truth):
    return [set(truth[i].indices.tolist()) for i in range(truth.shape[0])], [[label for label in row if label >= 0]
                                                                                for row in ranked.tolist()]


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

    ks, recall_ks = (1, 3, 5), (10, 15)
    positives, rankings = truth_and_rankings(ranked, truth)
    got = per_instance_metrics(ranked, truth, ks, recall_ks)
    want = oracle.per_input(rankings, positives, ks=ks, recall_ks=recall_ks)
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-12, err_msg=name)

    got_f1 = macro_f1_by_segment(ranked, truth, freq, k=5)
    want_f1 = oracle.macro_f1(rankings, positives, freq, k=5)
    assert got_f1.keys() == want_f1.keys()
    for name, value in got_f1.items():
        if want_f1[name] is None:
            assert math.isnan(value), name
        else:
            assert value == pytest.approx(want_f1[name], abs=1e-9), name


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


@pytest.mark.parametrize("outlier", [False, True])
def test_sparse_rows_wider_than_k_match_the_reference(outlier):
    """Rows of 0 to 5k candidates with ties at the k-th score (the cut keeps them all); with an outlier row
    of every label the padding would exceed 4 cells per candidate, so every candidate is sorted instead."""
    rng = np.random.default_rng(11)
    n, width, k = 40, 400, 10
    dense = np.zeros((n, width))
    for i in range(n):
        cols = rng.choice(width, size=rng.integers(0, 5 * k), replace=False)
        dense[i, cols] = rng.integers(0, 4, size=cols.size) / 4 + 0.25  # four scores: ties at every cut
    if outlier:
        dense[0] = rng.integers(1, 4, size=width)
    scores = sp.csr_matrix(dense)
    exclude = sp.random(n, width, density=0.05, random_state=rng, format="csr")
    assert (np.diff(scores.indptr) > k).sum() > n // 2
    assert top_k(scores, k, exclude=exclude).tolist() == reference_top_k(scores, k, exclude)


@pytest.mark.parametrize("pad_limit", [0, 4, 1000])
def test_every_sorting_path_matches_the_reference(monkeypatch, pad_limit):
    """0: no row is padded, every candidate is sorted together; 1000: every row is padded and sorted on its
    own, its widest rows included; 4: the default, where the sparse scores here (rows of 0 to 60 candidates, one
    of 300) take the joint sort and the dense ones the padded."""
    monkeypatch.setattr(ranking, "_PAD_LIMIT", pad_limit)
    rng = np.random.default_rng(5)
    n, width, k = 60, 300, 7
    dense = np.zeros((n, width))
    for i in range(n):
        cols = rng.choice(width, size=300 if i == 3 else rng.integers(0, 60), replace=False)
        dense[i, cols] = rng.integers(0, 5, size=cols.size) / 5 - 0.5  # ties everywhere, negative scores too
    scores = sp.csr_matrix(dense)
    exclude = sp.random(n, width, density=0.1, random_state=rng, format="csr")
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
