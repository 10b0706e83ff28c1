"""The knowledge memory: key sets, an index over the inputs and one over the labels merged into the joint
search (real hnswlib and exact), binary values."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from raexmc.errors import DataError
from raexmc.memory import keys_values
from raexmc.memory.indexes import build_memory_indexes, load_joint_search, memory_backend
from raexmc.memory.keys_values import memory_keys, training_values


@pytest.fixture
def embeddings(tmp_path):
    rng = np.random.default_rng(3)
    folder = tmp_path / "embeddings"
    folder.mkdir()
    for split, n in (("train", 40), ("labels", 15), ("test", 6)):
        v = rng.normal(size=(n, 8)).astype(np.float32)
        np.save(folder / f"{split}.npy", v / np.linalg.norm(v, axis=1, keepdims=True))
    return folder


def test_key_sets_stack_in_key_id_order(embeddings):
    train, labels = np.load(embeddings / "train.npy"), np.load(embeddings / "labels.npy")
    np.testing.assert_array_equal(memory_keys(embeddings), np.vstack([train, labels]))
    np.testing.assert_array_equal(memory_keys(embeddings, "labels"), labels)
    np.testing.assert_array_equal(memory_keys(embeddings, "inputs"), train)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_stacked_rows_are_the_chosen_rows_of_each_part_in_turn(monkeypatch, dtype):
    rng = np.random.default_rng(4)
    inputs, labels = rng.normal(size=(11, 3)).astype(dtype), rng.normal(size=(4, 3)).astype(dtype)
    rows = np.array([0, 2, 3, 7, 8, 10])
    monkeypatch.setattr(keys_values, "GATHER_ROWS", 4)  # blocks end inside both parts
    keys = keys_values.stack_rows([(inputs, rows), (labels, None)])
    assert keys.dtype == np.float32
    np.testing.assert_array_equal(keys, np.concatenate([inputs[[0, 2, 3, 7, 8, 10]], labels]).astype(np.float32))


@pytest.mark.parametrize("backend", ["exact", "hnsw"])
def test_every_key_is_indexed_once_and_the_joint_search_merges(embeddings, tmp_path, backend):
    built = build_memory_indexes(embeddings, tmp_path / "index", backend, M=16, ef_construction=100, threads=1)
    assert {name: values["keys"] for name, values in built.items()} == {"inputs": 40, "labels": 15}
    assert sorted(p.name for p in (tmp_path / "index").iterdir()) == ["inputs", "labels"]
    assert memory_backend(tmp_path / "index") == backend
    queries = np.load(embeddings / "test.npy")
    keys = memory_keys(embeddings)
    memory = load_joint_search(tmp_path / "index", keys if backend == "exact" else None, ef_search=100)
    for hits, key_set in ((memory.search(queries, 5), keys), *zip(memory.search_parts(queries, 5),
                                                                   (keys[:40], keys[40:]))):
        brute = np.argsort(-(queries @ key_set.T), axis=1, kind="stable")[:, :5]
        np.testing.assert_array_equal(hits[0], brute)  # joint ids, and each part's ids in its own key set


def test_an_exact_memory_needs_its_keys(embeddings, tmp_path):
    build_memory_indexes(embeddings, tmp_path / "index", "exact")
    with pytest.raises(DataError, match="keeps no keys"):
        load_joint_search(tmp_path / "index")
    with pytest.raises(DataError, match="shape"):
        load_joint_search(tmp_path / "index", memory_keys(embeddings)[:50])


def test_values_are_binary_unless_graded_is_asked_for():
    Y = sp.csr_matrix(np.array([[1.0, 0.0, 0.5], [0.0, 2.0, 0.0]]))
    np.testing.assert_array_equal(training_values(Y).toarray(), [[1, 0, 1], [0, 1, 0]])
    np.testing.assert_array_equal(training_values(Y, "graded").toarray(), Y.toarray())
    assert Y.data.tolist() == [1.0, 0.5, 2.0]  # the dataset's matrix is left as it was


def test_values_take_over_the_matrix_handed_to_them():
    """copy=False: a float64 matrix's arrays become the values' (the stages hand over the 0.6 GB Y_train)."""
    Y = sp.csr_matrix((np.array([1.0, 0.0, 0.5, 2.0]), np.array([0, 1, 2, 1]), np.array([0, 3, 4])), shape=(2, 3))
    values = training_values(Y, copy=False)  # with a stored zero, which the values drop
    np.testing.assert_array_equal(values.toarray(), [[1, 0, 1], [0, 1, 0]])
    assert values.nnz == 3
    assert np.shares_memory(values.data, Y.data) and np.shares_memory(values.indices, Y.indices)
    graded = training_values(sp.csr_matrix(np.array([[0.5, 0.0], [0.0, 3.0]], dtype=np.float32)), "graded",
                             copy=False)
    assert graded.dtype == np.float64 and graded.toarray().tolist() == [[0.5, 0.0], [0.0, 3.0]]
