"""Choosing a share of the training-input keys: exactly the requested count, and merged keys whose values
are their members' mean, worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from raexmc.memory.key_selection import InputsWithLabels, _fill_empty, _shares, kept_count, select_keys
from tests.helpers import unit_rows as random_unit_rows


def unit_rows(n: int, seed: int = 0) -> np.ndarray:
    return random_unit_rows(np.random.default_rng(seed), n, 8)


def label_rows(n: int, num_labels: int = 5, seed: int = 1) -> sp.csr_matrix:
    return sp.csr_matrix((np.random.default_rng(seed).random((n, num_labels)) < 0.4).astype(np.float64))


@pytest.mark.parametrize("keep, n, expected", [(0.25, 10, 3), (0.1, 10, 1), (0.5, 7, 4), (0.0, 10, 0), (1.0, 10, 10),
                                               (0.1, 103, 10), (0.25, 103, 26)])
def test_kept_count_rounds_half_up(keep, n, expected):
    assert kept_count(keep, n) == expected


@pytest.mark.parametrize("method", ["random", "kmeans", "kmeans-labels"])
@pytest.mark.parametrize("keep, expected", [(0.1, 10), (0.25, 26), (0.5, 52), (0.0, 0), (1.0, 103)])
def test_selection_keeps_exactly_the_requested_share(method, keep, expected):
    """103 inputs in cells of 16 (7 coarse cells for the k-means): exactly round(keep · 103) keys, each
    merged key standing for at least one input, all inputs accounted for once."""
    inputs, values = unit_rows(103), label_rows(103)
    selected = select_keys(inputs, values, keep, method, seed=3, cell_size=16, labels=unit_rows(5, seed=2))
    assert len(selected.keys) == selected.values.shape[0] == len(selected.counts) == expected
    assert selected.values.shape[1] == 5 and selected.keys.shape == (expected, 8)
    assert (selected.counts >= 1).all()
    assert selected.counts.sum() == (expected if method == "random" else (103 if expected else 0))
    np.testing.assert_allclose(np.linalg.norm(selected.keys, axis=1), 1.0, rtol=0, atol=1e-5)


def test_random_keeps_inputs_as_they_are():
    inputs, values = unit_rows(20), label_rows(20)
    selected = select_keys(inputs, values, 0.5, "random", seed=0)
    rows = [int(np.flatnonzero((inputs == key).all(axis=1))[0]) for key in selected.keys]
    assert len(set(rows)) == 10
    np.testing.assert_array_equal(selected.values.toarray(), values[rows].toarray())


def test_kmeans_merges_near_duplicates_into_their_mean():
    """Two pairs of near-duplicate inputs, keep 0.5: one key per pair, pointing along the pair, carrying
    the mean of the pair's label rows and its count 2."""
    e1, e2 = np.eye(4, dtype=np.float32)[:2]
    inputs = np.array([e1, e1 + [0, 0, 0.1, 0], e2, e2 + [0, 0, 0, 0.1]], dtype=np.float32)
    inputs /= np.linalg.norm(inputs, axis=1, keepdims=True)
    values = sp.csr_matrix(np.array([[1, 0, 0], [1, 1, 0], [0, 0, 1], [0, 1, 1]], dtype=np.float64))
    selected = select_keys(inputs, values, 0.5, "kmeans", seed=0)
    order = np.argsort(-selected.keys[:, 0])  # the key along e1 first
    keys, merged = selected.keys[order], selected.values.toarray()[order]
    assert selected.counts.tolist() == [2, 2]
    np.testing.assert_allclose(merged, [[1, 0.5, 0], [0, 0.5, 1]], rtol=0, atol=1e-9)
    # the unit mean of (1, 0, 0, 0) and (1, 0, 0.1, 0)/|.|: |.| = sqrt(1.01) = 1.004988
    mean = (np.array([1, 0, 0, 0]) + np.array([1, 0, 0.1, 0]) / 1.004988) / 2
    np.testing.assert_allclose(keys[0], mean / np.linalg.norm(mean), atol=1e-5)


def test_kmeans_labels_clusters_each_input_with_its_labels_keys():
    """unit(x + unit(mean of its positive labels' keys)), by hand; an input without labels is its key."""
    x = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype=np.float32)
    z = np.array([[0, 1, 0], [0, 0, 1]], dtype=np.float32)
    values = sp.csr_matrix(np.array([[1, 1], [0.5, 0], [0, 0]]))  # a graded 0.5 counts as positive
    points = InputsWithLabels(x, values, z)[np.arange(3)]
    # input 0: labels 0 and 1, mean (0, .5, .5) -> unit (0, .7071, .7071); x + that = (1, .7071, .7071), |.| = 1.41421
    np.testing.assert_allclose(points[0], [0.70711, 0.5, 0.5], atol=1e-5)
    np.testing.assert_allclose(points[1], [0, 1, 0], atol=1e-6)  # (0, 1, 0) + (0, 1, 0), made unit
    np.testing.assert_allclose(points[2], [0, 0, 1], atol=1e-6)


def test_kmeans_labels_keeps_look_alikes_with_different_labels_apart():
    """Four copies of one input, two with label A and two with label B, keep 0.5: plain k-means cannot
    tell them apart, kmeans-labels merges each label's pair, so each key's value is one label, not a half
    of each."""
    inputs = np.tile(np.array([[1, 0, 0, 0]], dtype=np.float32), (4, 1))
    values = sp.csr_matrix(np.array([[1, 0], [0, 1], [1, 0], [0, 1]], dtype=np.float64))
    labels = np.array([[0, 0, 1, 0], [0, 0, 0, 1]], dtype=np.float32)
    selected = select_keys(inputs, values, 0.5, "kmeans-labels", seed=0, labels=labels)
    assert selected.counts.tolist() == [2, 2]
    assert sorted(map(tuple, selected.values.toarray())) == [(0.0, 1.0), (1.0, 0.0)]
    np.testing.assert_allclose(selected.keys, inputs[:2], atol=1e-6)


def test_the_same_seed_gives_the_same_memory_and_value_rows_of_other_inputs_are_refused():
    inputs, values = unit_rows(60), label_rows(60)
    a, b = (select_keys(inputs, values, 0.2, "kmeans", seed=5, cell_size=16) for _ in range(2))
    np.testing.assert_array_equal(a.keys, b.keys)
    np.testing.assert_array_equal(a.counts, b.counts)
    with pytest.raises(ValueError, match="10 input keys but 9 value rows"):
        select_keys(unit_rows(10), label_rows(9), 0.5, "kmeans")


def test_an_empty_cluster_takes_the_worst_fitting_point_and_shares_go_to_the_largest_remainders():
    # Cluster 1 is empty; point 1 fits its cluster 0 worst (0.1 < 0.5 < 0.9), and cluster 0 keeps two members.
    assert _fill_empty(np.array([0, 0, 0]), np.array([0.9, 0.1, 0.5]), 2).tolist() == [0, 1, 0]
    # One key per cell, the other 2 over the inputs beyond the first (0, 4, 3): exactly 0, 8/7, 6/7, so
    # floors 0, 1, 0 and the last one to the largest remainder, 6/7 (cell 2): 1, 2, 2.
    assert _shares(np.array([1, 5, 4]), 5).tolist() == [1, 2, 2]


@pytest.mark.parametrize("seed", range(20))
def test_shares_sum_to_the_count_each_within_its_cell(seed):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 6, size=rng.integers(2, 12))
    sizes[0] = max(sizes[0], 1)  # at least one non-empty cell
    count = int(rng.integers((sizes > 0).sum(), sizes.sum() + 1))
    shares = _shares(sizes, count)
    assert shares.sum() == count
    assert np.all(shares[sizes == 0] == 0)
    assert np.all((1 <= shares[sizes > 0]) & (shares[sizes > 0] <= sizes[sizes > 0])), (sizes, count, shares)
