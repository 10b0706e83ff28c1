"""Exact search (ExactIndex; TorchIndex run on the CPU): any block size gives one block's ids and scores, ties
included. Integer vectors make every product exact in float32, so a difference is the blocking's, not rounding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from raexmc.memory import torch_index
from raexmc.memory.exact import ExactIndex, block_rows
from raexmc.memory.persistence import load_index, save_index
from raexmc.memory.search import sort_rows
from raexmc.memory.torch_index import TorchIndex, block_rows_for, pool_size
from tests.helpers import brute_top_k, unit_rows

N_KEYS, DIM = 50, 8
ROW_BYTES = 4 * N_KEYS  # one query's float32 similarities against every key
UNBOUNDED = 1 << 40
N_TOY, DIM_TOY, K = 3000, 48, 20


def integer_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(-3, 4, size=(n, DIM)).astype(np.float32)


@pytest.fixture
def tied():
    """Keys 0..9 repeat one vector and 20..29 another, with few distinct integer scores: ties everywhere."""
    rng = np.random.default_rng(3)
    keys = integer_rows(rng, N_KEYS)
    keys[1:10] = keys[0]
    keys[21:30] = keys[20]
    return keys, np.vstack([keys[0], keys[20], integer_rows(rng, 21)])


@pytest.fixture(scope="module")
def toy_memory():
    rng = np.random.default_rng(11)
    return unit_rows(rng, N_TOY, DIM_TOY), unit_rows(rng, 257, DIM_TOY)


@pytest.mark.parametrize(("budget", "chunk_rows", "rows"), [
    (1, 4096, 1), (ROW_BYTES, 4096, 1), (3 * ROW_BYTES + 5, 4096, 2), (10 * ROW_BYTES, 4096, 8),
    (UNBOUNDED, 4096, 23), (UNBOUNDED, 7, 4)])
def test_exact_blocks_follow_the_budget_and_keep_ids_and_scores(tied, budget, chunk_rows, rows, monkeypatch):
    keys, queries = tied
    blocks = []

    class Recording(ExactIndex):
        def _scores(self, chunk):
            blocks.append(len(chunk))
            return super()._scores(chunk)

    # A tiny selection budget also takes the selection through its rows one at a time.
    monkeypatch.setattr("raexmc.memory.exact.SELECT_BUDGET", 1)
    ids, sims = Recording(keys, chunk_rows=chunk_rows, block_bytes=budget).search(queries, 12)
    assert blocks == [rows] * (len(queries) // rows) + ([len(queries) % rows] if len(queries) % rows else [])
    want_ids, want_sims = brute_top_k(queries, keys, 12)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_array_equal(sims, want_sims)
    np.testing.assert_array_equal(ids[0, :10], np.arange(10))
    np.testing.assert_array_equal(ids[1, :10], np.arange(20, 30))


def test_block_rows_is_the_budget_in_rows_at_least_one_at_most_chunk_rows_a_power_of_two(tied):
    assert block_rows(1000, 4000 * 7 + 3) == 4
    assert block_rows(1000, 4000 * 8) == 8
    assert block_rows(1000, 1) == 1
    assert block_rows(10, 1 << 30, max_rows=64) == 64
    assert block_rows(10, 1 << 30, max_rows=100) == 64
    assert block_rows(0, 100) == 16
    with pytest.raises(ValueError, match="block_bytes must be an integer >= 1, got 0"):  # a budget of no bytes
        ExactIndex(tied[0], block_bytes=0)
    with pytest.raises(ValueError, match="free_bytes must be an integer >= 1, got 0"):
        TorchIndex(tied[0], "cpu", free_bytes=0)


@pytest.mark.parametrize("backend", [ExactIndex, TorchIndex])
def test_progress_bar_counts_every_query_once_and_changes_no_result(tied, backend, capsys):
    keys, queries = tied
    # 4 queries a block: 23 queries make 6 blocks, the last of 3
    index = ExactIndex(keys, block_bytes=4 * ROW_BYTES) if backend is ExactIndex else \
        TorchIndex(keys, "cpu", free_bytes=8 * ROW_BYTES)
    quiet, shown = index.search(queries, 5), index.search(queries, 5, progress=True)
    bar = capsys.readouterr().err
    assert "exact search" in bar and f"{len(queries)}/{len(queries)}" in bar
    assert f"{len(queries) + 1}/" not in bar
    for a, b in zip(quiet, shown):
        np.testing.assert_array_equal(a, b)


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


@pytest.mark.parametrize("half", [False, True], ids=["fp32", "fp16-rescored"])
@pytest.mark.parametrize("free_bytes", [1, 1 << 20, 1 << 30])
def test_torch_search_is_the_cpu_exact_search(toy_memory, half, free_bytes):
    keys, queries = toy_memory
    got = TorchIndex(keys, "cpu", half=half, free_bytes=free_bytes).search(queries, K)
    assert_same_search(got, ExactIndex(keys).search(queries, K), tolerance=1e-5)


def test_torch_ties_go_to_the_smaller_id_and_rows_are_sorted():
    """Eleven copies of one integer key tie at the top of query 0; all fit in k, so their order is defined."""
    rng = np.random.default_rng(2)
    keys = integer_rows(rng, 60)
    keys[[5, 17, 18, 30, 31, 32, 40, 41, 42, 59]] = keys[0]
    queries = np.vstack([keys[0], integer_rows(rng, 9)])
    ids, sims = TorchIndex(keys, "cpu").search(queries, 15)
    want_ids, want_sims = brute_top_k(queries, keys, 15)
    assert (want_sims[0] == want_sims[0, 0]).sum() == 11 and list(ids[0, :11]) == list(want_ids[0, :11])
    np.testing.assert_array_equal(sims, want_sims)  # elsewhere torch.topk takes any of the keys tied at the cut
    np.testing.assert_array_equal(ids, sort_rows(ids, sims)[0])


def test_block_rows_are_the_largest_power_of_two_the_free_memory_holds_and_the_pool_k_plus_a_margin():
    # by hand: 1,000 keys at 2 bytes, twice (product and topk scratch) = 4,000 bytes, plus the query
    # (10 dims in fp32 and fp16, 60 bytes): 4,060 bytes a query
    assert block_rows_for(4060 * 5, 1000, 10, 2) == 4
    assert block_rows_for(4060 * 8, 1000, 10, 2) == 8
    assert block_rows_for(4060 * 8 - 1, 1000, 10, 2) == 4
    assert block_rows_for(1, 1000, 10, 2) == 1
    assert block_rows_for(1 << 40, 1000, 10, 2, max_rows=100) == 64
    # the rescored pool is k plus a margin
    assert pool_size(200, 10**6, rescored=True) == 250
    assert pool_size(10, 10**6, rescored=True) == 26
    assert pool_size(200, 10**6, rescored=False) == 200
    assert pool_size(200, 210, rescored=True) == 210


@pytest.mark.parametrize("free", [10**6, 10**9, 6 * 10**10])
@pytest.mark.parametrize(("n_keys", "dim"), [(2_248_619, 384), (1_305_265, 384), (50, 8)])
def test_a_block_stays_within_the_free_memory(free, n_keys, dim):
    """At the LF-AmazonTitles-1.3M shape and a toy one: the rows' bytes stay under the budget, and twice the
    rows would not (unless at the cap or at one row)."""
    rows = block_rows_for(free, n_keys, dim, 2)
    per_row = 2 * n_keys * 2 + dim * 6
    assert rows == 1 or rows * per_row <= free
    assert rows == 1 << 14 or 2 * rows * per_row > free


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU visible")
def test_gpu_search_is_the_cpu_exact_search_on_a_sample(tmp_path):
    """A saved exact index reopens on the GPU it searches on (fp16 product, fp32 rescoring, blocks sized by its free
    memory) as a TorchIndex: the CPU exact search's answers."""
    rng = np.random.default_rng(7)
    keys, queries = unit_rows(rng, 200_000, 384), unit_rows(rng, 2_000, 384)
    index = load_index(save_index(ExactIndex(keys), tmp_path / "exact"), keys=keys, device="cuda")
    assert isinstance(index, TorchIndex) and index.half and index.query_block >= 1
    assert_same_search(index.search(queries, 200), ExactIndex(keys).search(queries, 200), tolerance=1e-5)


def test_each_rescored_slice_is_scored_against_its_own_queries_which_fp16_alone_is_not(toy_memory, monkeypatch):
    """A block's fp32 rescoring goes through its rows in slices (RESCORE_BYTES): with the byte budget shrunk to
    four rows' candidates, a 64-query block is rescored in 16 slices, each against its own queries."""
    keys, queries = toy_memory
    monkeypatch.setattr(torch_index, "RESCORE_BYTES", 4 * pool_size(K, N_TOY, rescored=True) * DIM_TOY * 4)
    index = TorchIndex(keys, "cpu", half=True, free_bytes=1 << 20)
    assert index.query_block == 64   # 1 MiB over (2 x 3,000 keys x 2 bytes + 48 x 6) bytes a query, to a power of 2
    assert_same_search(index.search(queries, K), ExactIndex(keys).search(queries, K), tolerance=1e-5)
    # what the fp32 rescoring buys: fp16 similarities alone are off by far more than that tolerance
    half = torch.from_numpy(queries).half() @ torch.from_numpy(keys).half().T
    assert np.abs(half.float().numpy() - queries @ keys.T).max() > 1e-4
