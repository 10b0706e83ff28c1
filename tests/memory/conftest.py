"""Fixtures of the memory tests: made-up unit embeddings, on disk as the embed stage writes them or in memory."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from raexmc.memory.exact import ExactIndex
from raexmc.memory.keys_values import training_values
from raexmc.memory.merge import JointSearch
from tests.helpers import unit_rows


@pytest.fixture
def embeddings(tmp_path):
    """40 training inputs, 15 labels and 12 test queries of 8 dimensions in an embeddings folder."""
    rng = np.random.default_rng(3)
    (tmp_path / "embeddings").mkdir()
    for split, n in (("train", 40), ("labels", 15), ("test", 12)):
        np.save(tmp_path / "embeddings" / f"{split}.npy", unit_rows(rng, n, 8))
    return tmp_path / "embeddings"


@pytest.fixture
def random_memory():
    """`random_memory(seed, inputs, labels, queries, density)`: unit keys of 16 dimensions, binary values Y of that
    density, and the index stage's exact searches of them."""
    def make(seed: int, n_inputs: int, n_labels: int, n_queries: int, density: float):
        rng = np.random.default_rng(seed)
        train, labels, queries = (unit_rows(rng, n, 16) for n in (n_inputs, n_labels, n_queries))
        Y = training_values(sp.csr_matrix((rng.random((n_inputs, n_labels)) < density).astype(np.float64)))
        return train, labels, queries, Y, JointSearch(ExactIndex(train), ExactIndex(labels))
    return make
