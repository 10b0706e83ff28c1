"""The joint search as a merge of the inputs' and the labels' searches: exact search over the stacked
keys is the reference, hnswlib is real."""

from __future__ import annotations

import numpy as np
import pytest

from raexmc.errors import DataError
from raexmc.evaluation.metrics import recall_at_k
from raexmc.memory.exact import ExactIndex
from raexmc.memory.hnsw import build_hnsw
from raexmc.memory.merge import JointSearch, merge_top_k
from tests.helpers import search_all

N_INPUTS, N_LABELS = 40, 9


def integer_memory(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inputs, labels and queries of small integers: every inner product is exact in float32 whatever
    order BLAS sums in, so similarities compare exactly and ties are real. Labels 0-2 repeat inputs
    0-2 (a tie across the key sets) and inputs 10-14 repeat input 5 (ties within one)."""
    rng = np.random.default_rng(seed)
    inputs = rng.integers(-2, 3, size=(N_INPUTS, 6)).astype(np.float32)
    inputs[10:15] = inputs[5]
    labels = rng.integers(-2, 3, size=(N_LABELS, 6)).astype(np.float32)
    labels[:3] = inputs[:3]
    queries = np.vstack([inputs[:3], inputs[5:6], rng.integers(-2, 3, size=(8, 6))]).astype(np.float32)
    return inputs, labels, queries


def test_merge_in_row_blocks_equals_one_block(monkeypatch):
    """The merge works through the queries MERGE_ROWS rows at a time: blocks of 1 and 5 rows give
    what one block of all rows gives (12 queries, so the last block is partial)."""
    import raexmc.memory.merge as merge

    inputs, labels, queries = integer_memory()
    hits_a, hits_b = ExactIndex(inputs).search(queries, 7), ExactIndex(labels).search(queries, 7)
    monkeypatch.setattr(merge, "MERGE_ROWS", 10_000)
    whole = merge_top_k(hits_a, 0, hits_b, N_INPUTS, 7)
    for rows in (1, 5):
        monkeypatch.setattr(merge, "MERGE_ROWS", rows)
        blocked = merge_top_k(hits_a, 0, hits_b, N_INPUTS, 7)
        np.testing.assert_array_equal(blocked[0], whole[0])
        np.testing.assert_array_equal(blocked[1], whole[1])


def test_merge_by_hand():
    # Set a: ids 0, 2 (joint 0, 2); set b: ids 1, 0 and padding (joint 11, 10 at offset 10).
    hits_a = (np.array([[0, 2]]), np.array([[0.9, 0.5]], np.float32))
    hits_b = (np.array([[1, 0, -1]]), np.array([[0.9, 0.7, -np.inf]], np.float32))
    ids, sims = merge_top_k(hits_a, 0, hits_b, 10, 3)
    np.testing.assert_array_equal(ids, [[0, 11, 10]])  # 0.9 tie: the smaller joint id first
    np.testing.assert_array_equal(sims, np.array([[0.9, 0.9, 0.7]], np.float32))
    ids, sims = merge_top_k(hits_a, 0, hits_b, 10, 6)  # more than both hold: padded
    np.testing.assert_array_equal(ids, [[0, 11, 10, 2, -1, -1]])
    assert np.isneginf(sims[0, 4:]).all()


@pytest.mark.parametrize("k", [1, 4, N_LABELS, 20, N_INPUTS + N_LABELS, N_INPUTS + N_LABELS + 5])
def test_merged_exact_searches_are_the_exact_joint_search(k):
    inputs, labels, queries = integer_memory()
    merged = JointSearch(ExactIndex(inputs), ExactIndex(labels)).search(queries, k)
    joint = ExactIndex(np.vstack([inputs, labels])).search(queries, k)
    np.testing.assert_array_equal(merged[0], joint[0])
    np.testing.assert_array_equal(merged[1], joint[1])
    if k > N_LABELS:  # the labels' side ran short: its padding never enters before a real key
        assert (merged[0][:, :min(k, N_INPUTS + N_LABELS)] >= 0).all()
    # The ties are exercised: query 0 is input 0 and label 0 (joint id N_INPUTS), equal, the input first.
    at_top = merged[0][0][merged[1][0] == merged[1][0, 0]]
    assert k < 2 or (0 in at_top and N_INPUTS in at_top and list(at_top) == sorted(at_top))


def test_the_parts_prefixes_are_their_own_exact_searches():
    inputs, labels, queries = integer_memory(1)
    joint, inputs_hits, labels_hits = search_all(JointSearch(ExactIndex(inputs), ExactIndex(labels)), queries, 12, 5)
    for hits, want in ((joint, ExactIndex(np.vstack([inputs, labels])).search(queries, 12)),
                       (inputs_hits, ExactIndex(inputs).search(queries, 5)),
                       (labels_hits, ExactIndex(labels).search(queries, 5))):
        np.testing.assert_array_equal(hits[0], want[0])
        np.testing.assert_array_equal(hits[1], want[1])


def test_mismatched_parts_are_refused():
    inputs, labels, queries = integer_memory()
    with pytest.raises(DataError, match="dimension"):
        JointSearch(ExactIndex(inputs), ExactIndex(labels[:, :4]))
    hits = ExactIndex(inputs).search(queries, 3)
    with pytest.raises(DataError, match="queries"):
        merge_top_k(hits, 0, (hits[0][:2], hits[1][:2]), N_INPUTS, 3)


def test_merged_hnsw_recall_is_at_least_the_joint_graphs():
    """At the same graph settings and beam, the merge of two graphs finds at least as many of the exact
    joint top-k as one graph over all keys (each side searches a smaller graph with the same beam)."""
    rng = np.random.default_rng(11)
    keys = rng.standard_normal((3000, 24)).astype(np.float32)
    keys /= np.linalg.norm(keys, axis=1, keepdims=True)
    inputs, labels = keys[:2000], keys[2000:]
    queries = keys[rng.choice(3000, 200, replace=False)] + 0.3 * rng.standard_normal((200, 24)).astype(np.float32)
    k, ef, settings = 50, 50, {"M": 6, "ef_construction": 20, "threads": 1, "progress": False}
    exact_ids, _ = ExactIndex(keys).search(queries, k)
    joint_ids, _ = build_hnsw(keys, **settings).search(queries, k, ef_search=ef)
    merged = JointSearch(build_hnsw(inputs, ef_search=ef, **settings), build_hnsw(labels, ef_search=ef, **settings))
    merged_ids, _ = merged.search(queries, k)
    joint_recall, merged_recall = recall_at_k(joint_ids, exact_ids), recall_at_k(merged_ids, exact_ids)
    assert joint_recall < 0.99, "settings this weak must leave the joint graph something to miss"
    assert merged_recall >= joint_recall
