"""The torch exact search (the GPU's backend, run here by torch on the CPU) against the CPU's ExactIndex, and the
sizing of its blocks by free device memory."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from raexmc.memory import torch_index
from raexmc.memory.exact import ExactIndex
from raexmc.memory.search import sort_rows
from raexmc.memory.torch_index import TorchIndex, block_rows_for, pool_size
from tests.helpers import unit_rows

N_KEYS, DIM, K = 3000, 48, 20


def assert_same_search(got, want, tolerance: float) -> None:
    """Scores within `tolerance`; ids equal wherever the reference's score is apart from its neighbours' by more
    than twice that (elsewhere two searches may rightly order tied keys differently)."""
    (ids, sims), (want_ids, want_sims) = got, want
    np.testing.assert_allclose(sims, want_sims, atol=tolerance, rtol=0)
    gaps = np.abs(np.diff(want_sims, axis=1))
    apart = np.ones_like(want_sims, dtype=bool)
    apart[:, 1:] &= gaps > 2 * tolerance
    apart[:, :-1] &= gaps > 2 * tolerance
    assert apart.mean() > 0.9  # the comparison is not vacuous
    np.testing.assert_array_equal(ids[apart], want_ids[apart])


@pytest.fixture(scope="module")
def toy_memory():
    rng = np.random.default_rng(11)
    return unit_rows(rng, N_KEYS, DIM), unit_rows(rng, 257, DIM)


@pytest.mark.parametrize("half", [False, True], ids=["fp32", "fp16-rescored"])
@pytest.mark.parametrize("free_bytes", [1, 1 << 20, 1 << 30])
def test_torch_search_is_the_cpu_exact_search(toy_memory, half, free_bytes):
    keys, queries = toy_memory
    got = TorchIndex(keys, "cpu", half=half, free_bytes=free_bytes).search(queries, K)
    assert_same_search(got, ExactIndex(keys).search(queries, K), tolerance=1e-5)


def test_half_precision_alone_would_not_be_the_exact_search(toy_memory):
    """What the fp32 rescoring buys: fp16 similarities are off by far more than the tolerance above."""
    keys, queries = toy_memory
    half = torch.from_numpy(queries).half() @ torch.from_numpy(keys).half().T
    exact = queries @ keys.T
    assert np.abs(half.float().numpy() - exact).max() > 1e-4


def test_ties_go_to_the_smaller_id_and_rows_are_sorted():
    """Integer vectors (every product exact): ten copies of one key tie; all fit in k, so the order is defined."""
    rng = np.random.default_rng(2)
    keys = rng.integers(-3, 4, size=(60, 8)).astype(np.float32)
    keys[[5, 17, 18, 30, 31, 32, 40, 41, 42, 59]] = keys[0]
    queries = np.vstack([keys[0], rng.integers(-3, 4, size=(9, 8)).astype(np.float32)])
    ids, sims = TorchIndex(keys, "cpu").search(queries, 15)
    scores = queries.astype(np.float64) @ keys.astype(np.float64).T
    want = np.array([sorted(range(len(keys)), key=lambda j, row=row: (-row[j], j))[:15] for row in scores])
    top_value = scores[0].max()
    assert (scores[0] == top_value).sum() == 11 and list(ids[0, :11]) == [0, 5, 17, 18, 30, 31, 32, 40, 41, 42, 59]
    np.testing.assert_array_equal(sims, np.take_along_axis(scores, want, axis=1).astype(np.float32))
    resorted = sort_rows(ids, sims)
    np.testing.assert_array_equal(ids, resorted[0])


def test_fewer_keys_than_k_pad_with_minus_one():
    keys = unit_rows(np.random.default_rng(0), 4, DIM)
    ids, sims = TorchIndex(keys, "cpu", half=True).search(keys, 6)
    assert (ids[:, 4:] == -1).all() and np.isneginf(sims[:, 4:]).all()
    assert (ids[:, 0] == np.arange(4)).all()


def test_block_rows_are_the_largest_power_of_two_the_free_memory_holds():
    # by hand: 1,000 keys at 2 bytes, twice (product and topk scratch) = 4,000 bytes, plus the query
    # (10 dims in fp32 and fp16, 60 bytes): 4,060 bytes a query
    assert block_rows_for(4060 * 5, 1000, 10, 2) == 4
    assert block_rows_for(4060 * 8, 1000, 10, 2) == 8
    assert block_rows_for(4060 * 8 - 1, 1000, 10, 2) == 4
    assert block_rows_for(1, 1000, 10, 2) == 1
    assert block_rows_for(1 << 40, 1000, 10, 2, max_rows=100) == 64


@pytest.mark.parametrize("free", [10**6, 10**9, 6 * 10**10])
@pytest.mark.parametrize(("n_keys", "dim"), [(2_248_619, 384), (1_305_265, 384), (50, 8)])
def test_a_block_stays_within_the_free_memory(free, n_keys, dim):
    """At the LF-AmazonTitles-1.3M shape and a toy one: the rows' bytes stay under the budget, and twice the
    rows would not (unless at the cap or at one row)."""
    rows = block_rows_for(free, n_keys, dim, 2)
    per_row = 2 * n_keys * 2 + dim * 6
    assert rows == 1 or rows * per_row <= free
    assert rows == 1 << 14 or 2 * rows * per_row > free


def test_the_rescored_pool_is_k_plus_a_margin():
    assert pool_size(200, 10**6, rescored=True) == 250
    assert pool_size(10, 10**6, rescored=True) == 26
    assert pool_size(200, 10**6, rescored=False) == 200
    assert pool_size(200, 210, rescored=True) == 210


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU visible")
def test_gpu_search_is_the_cpu_exact_search_on_a_sample():
    """On a GPU (fp16 product, fp32 rescoring, blocks sized by its free memory): the CPU exact search's answers."""
    rng = np.random.default_rng(7)
    keys, queries = unit_rows(rng, 200_000, 384), unit_rows(rng, 2_000, 384)
    index = TorchIndex(keys, "cuda")
    assert index.half and index.query_block >= 1
    assert_same_search(index.search(queries, 200), ExactIndex(keys).search(queries, 200), tolerance=1e-5)


def test_each_rescored_slice_is_scored_against_its_own_queries(toy_memory, monkeypatch):
    """A block's fp32 rescoring goes through its rows in slices (RESCORE_BYTES): with the byte budget shrunk to
    four rows' candidates, a 64-query block is rescored in 16 slices, each against its own queries."""
    keys, queries = toy_memory
    rows = 4
    monkeypatch.setattr(torch_index, "RESCORE_BYTES", rows * pool_size(K, N_KEYS, rescored=True) * DIM * 4)
    index = TorchIndex(keys, "cpu", half=True, free_bytes=1 << 20)
    assert index.query_block == 64   # 1 MiB over (2 x 3,000 keys x 2 bytes + 48 x 6) bytes a query, to a power of 2
    assert_same_search(index.search(queries, K), ExactIndex(keys).search(queries, K), tolerance=1e-5)
