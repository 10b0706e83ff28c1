"""The knowledge memory: key sets, one index per key set (real hnswlib and exact), binary values."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from raexmc.errors import ConfigError
from raexmc.memory.indexes import build_memory_indexes, load_memory_index
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


@pytest.mark.parametrize("backend", ["exact", "hnsw"])
def test_each_key_set_has_its_own_index(embeddings, tmp_path, backend):
    built = build_memory_indexes(embeddings, tmp_path / "index", backend, M=16, ef_construction=100, threads=1)
    assert {name: values["keys"] for name, values in built.items()} == {"joint": 55, "labels": 15, "inputs": 40}
    queries = np.load(embeddings / "test.npy")
    for key_set, keys in (("joint", memory_keys(embeddings)), ("labels", np.load(embeddings / "labels.npy")),
                          ("inputs", np.load(embeddings / "train.npy"))):
        ids, _ = load_memory_index(tmp_path / "index", embeddings, key_set, ef_search=100).search(queries, 5)
        brute = np.argsort(-(queries @ keys.T), axis=1, kind="stable")[:, :5]
        np.testing.assert_array_equal(ids, brute)  # ids within the key set's own numbering


def test_values_are_binary_unless_graded_is_asked_for():
    Y = sp.csr_matrix(np.array([[1.0, 0.0, 0.5], [0.0, 2.0, 0.0]]))
    np.testing.assert_array_equal(training_values(Y).toarray(), [[1, 0, 1], [0, 1, 0]])
    np.testing.assert_array_equal(training_values(Y, "graded").toarray(), Y.toarray())
    assert Y.data.tolist() == [1.0, 0.5, 2.0]  # the dataset's matrix is left as it was
    with pytest.raises(ConfigError, match="infer.relevance"):
        training_values(Y, "weighted")
