"""Hard negative mining: never a positive, m distinct labels, -1 when too few, seeded, and an input's
negatives do not depend on which other inputs are mined with it."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from raexmc.memory.exact import ExactIndex
from raexmc.training.rounds import positive_mask, sample_negatives, sampling_keys

Y = sp.csr_matrix(np.array([[1, 0, 1, 0, 0], [0, 1, 0, 0, 0], [0, 0, 0, 0, 1]], dtype=np.float32))


def test_positives_are_masked_and_samples_are_distinct_non_positive_candidates_seeded_and_uniform():
    candidates = np.array([[2, 1, 0, -1], [1, 3, -1, -1], [4, 4, 0, 2]])
    assert positive_mask(candidates, Y).tolist() == [[True, False, True, False], [True, False, False, False],
                                                      [True, True, False, False]]
    candidates = np.array([[0, 1, 2, 3, 4], [0, 1, 2, 3, 4], [4, 3, -1, -1, -1]])
    got = sample_negatives(candidates, np.arange(3), Y, m=2, rng=np.random.default_rng(0))
    assert set(got[0]) <= {1, 3, 4} and len(set(got[0])) == 2
    assert set(got[1]) <= {0, 2, 3, 4} and len(set(got[1])) == 2
    assert got[2].tolist() == [3, -1], "one usable candidate (label 4 is a positive): pad with -1"
    # sampling is seeded and roughly uniform
    candidates = np.tile(np.arange(5), (3000, 1))
    Y_many = sp.csr_matrix((3000, 5), dtype=np.float32)
    a = sample_negatives(candidates, np.arange(3000), Y_many, 1, np.random.default_rng(7))
    assert (a == sample_negatives(candidates, np.arange(3000), Y_many, 1, np.random.default_rng(7))).all()
    assert (a != sample_negatives(candidates, np.arange(3000), Y_many, 1, np.random.default_rng(8))).any()
    counts = np.bincount(a.ravel(), minlength=5)
    assert counts.min() > 500, counts  # about 600 each


def test_sampling_keys_are_rows_of_one_stream_in_any_order_and_any_block():
    whole = np.random.default_rng(3).random((1000, 6))
    some = np.array([999, 7, 420, 421, 0])
    for block in (1, 64, 1000, 4096):
        assert np.array_equal(sampling_keys(np.random.default_rng(3), 1000, some, 6, block), whole[some])
    assert sampling_keys(np.random.default_rng(3), 1000, some[:0], 6).shape == (0, 6)
    for outside in (-1, 1000):
        with pytest.raises(ValueError, match=r"\[0, 1000\)"):
            sampling_keys(np.random.default_rng(3), 1000, np.array([5, outside]), 6, 500)


def test_mining_a_subset_gives_those_inputs_the_negatives_of_mining_all_and_they_are_hard_non_positives():
    rng = np.random.default_rng(1)
    labels = rng.normal(size=(300, 16)).astype(np.float32)
    inputs = rng.normal(size=(200, 16)).astype(np.float32)
    Y_in = sp.random(200, 300, density=0.02, format="csr", random_state=2, dtype=np.float32)
    search = ExactIndex(labels).search
    everyone = sample_negatives(search(inputs, 20)[0], np.arange(200), Y_in, 3, np.random.default_rng(5))
    some = np.array([3, 77, 150, 199])
    assert np.array_equal(sample_negatives(search(inputs[some], 20)[0], some, Y_in, 3, np.random.default_rng(5)),
                          everyone[some])
    rng = np.random.default_rng(0)  # inputs near their one positive label: the negatives are the next nearest
    labels = rng.normal(size=(50, 8)).astype(np.float32)
    labels /= np.linalg.norm(labels, axis=1, keepdims=True)
    inputs = labels[:10] + 0.05 * rng.normal(size=(10, 8)).astype(np.float32)
    inputs /= np.linalg.norm(inputs, axis=1, keepdims=True)
    Y_in = sp.csr_matrix((np.ones(10, np.float32), (np.arange(10), np.arange(10))), shape=(10, 50))
    negatives = sample_negatives(ExactIndex(labels).search(inputs, 5)[0], np.arange(10), Y_in, m=2, rng=rng)
    top5, _ = ExactIndex(labels).search(inputs, 5)
    for i in range(10):
        assert i not in negatives[i] and set(negatives[i]) <= set(top5[i])
