"""The exact search's blocks are sized by a byte budget: any budget, down to one query a block, gives the
ids and scores of one block over all queries, ties included, on the CPU index and on the torch path.

The vectors hold small integers, so every inner product is exact in float32 whatever order the BLAS
adds it in: any difference between budgets is the blocking's, not rounding."""

from __future__ import annotations

import numpy as np
import pytest

from raexmc.memory.exact import ExactIndex, block_rows
from raexmc.memory.torch_index import TorchIndex

N_KEYS, DIM = 50, 8
ROW_BYTES = 4 * N_KEYS  # one query's float32 similarities against every key
UNBOUNDED = 1 << 40


def integer_rows(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(-3, 4, size=(n, DIM)).astype(np.float32)


@pytest.fixture
def tied():
    """Keys 0..9 repeat one vector and 20..29 another, with few distinct integer scores: ties everywhere."""
    rng = np.random.default_rng(3)
    keys = integer_rows(rng, N_KEYS)
    keys[1:10] = keys[0]
    keys[21:30] = keys[20]
    queries = np.vstack([keys[0], keys[20], integer_rows(rng, 21)])
    return keys, queries


def by_hand(queries: np.ndarray, keys: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact integer scores in float64, each row sorted by descending score then ascending id."""
    scores = queries.astype(np.float64) @ keys.astype(np.float64).T
    ids = np.array([sorted(range(len(keys)), key=lambda j, row=row: (-row[j], j))[:k] for row in scores])
    return ids, np.take_along_axis(scores, ids, axis=1).astype(np.float32)


@pytest.mark.parametrize(("budget", "rows"), [(1, 1), (ROW_BYTES, 1), (3 * ROW_BYTES + 5, 2),
                                              (10 * ROW_BYTES, 8), (UNBOUNDED, 23)])
def test_exact_blocks_follow_the_budget_and_keep_ids_and_scores(tied, budget, rows, monkeypatch):
    keys, queries = tied
    blocks = []

    class Recording(ExactIndex):
        def _scores(self, chunk):
            blocks.append(len(chunk))
            return super()._scores(chunk)

    # A tiny selection budget also takes the selection through its rows one at a time.
    monkeypatch.setattr("raexmc.memory.exact.SELECT_BUDGET", 1)
    ids, sims = Recording(keys, block_bytes=budget).search(queries, 12)
    assert blocks == [rows] * (len(queries) // rows) + ([len(queries) % rows] if len(queries) % rows else [])
    want_ids, want_sims = by_hand(queries, keys, 12)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_array_equal(sims, want_sims)
    np.testing.assert_array_equal(ids[0, :10], np.arange(10))
    np.testing.assert_array_equal(ids[1, :10], np.arange(20, 30))


def test_block_rows_is_the_budget_in_rows_at_least_one_at_most_chunk_rows_a_power_of_two():
    assert block_rows(1000, 4000 * 7 + 3) == 4
    assert block_rows(1000, 4000 * 8) == 8
    assert block_rows(1000, 1) == 1
    assert block_rows(10, 1 << 30, max_rows=64) == 64
    assert block_rows(10, 1 << 30, max_rows=100) == 64
    assert block_rows(0, 100) == 16


def test_a_budget_that_is_no_positive_integer_is_refused(tied):
    keys, _ = tied
    with pytest.raises(ValueError, match="block_bytes must be an integer >= 1, got 0"):
        ExactIndex(keys, block_bytes=0)
    with pytest.raises(ValueError, match="free_bytes must be an integer >= 1, got 0"):
        TorchIndex(keys, "cpu", free_bytes=0)


@pytest.mark.parametrize("budget", [1, 3 * ROW_BYTES, 10 * ROW_BYTES, UNBOUNDED])
def test_torch_path_blocks_keep_ids_and_scores(budget):
    """The GPU path, run by torch on the CPU: distinct scores (key j's first coordinate is 100 j), since
    torch.topk may put tied keys in any order."""
    rng = np.random.default_rng(5)
    keys = integer_rows(rng, N_KEYS)
    keys[:, 0] = 100 * np.arange(N_KEYS)
    queries = integer_rows(rng, 23)
    queries[:, 0] = rng.choice([-1, 1], size=len(queries))
    ids, sims = TorchIndex(keys, "cpu", free_bytes=budget).search(queries, 12)
    want_ids, want_sims = by_hand(queries, keys, 12)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_array_equal(sims, want_sims)


@pytest.mark.parametrize("path", ["index", "torch"])
def test_progress_bar_counts_every_query_once_and_changes_no_result(tied, path, capsys):
    keys, queries = tied
    block_bytes = 4 * ROW_BYTES  # 4 queries a block: 23 queries make 6 blocks, the last of 3
    if path == "index":
        index = ExactIndex(keys, block_bytes=block_bytes)
        quiet, shown = index.search(queries, 5), index.search(queries, 5, progress=True)
    else:
        index = TorchIndex(keys, "cpu", free_bytes=2 * block_bytes)
        quiet, shown = index.search(queries, 5), index.search(queries, 5, progress=True)
    bar = capsys.readouterr().err
    assert "exact search" in bar and f"{len(queries)}/{len(queries)}" in bar
    assert f"{len(queries) + 1}/" not in bar
    for a, b in zip(quiet, shown):
        np.testing.assert_array_equal(a, b)
