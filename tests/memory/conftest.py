"""Fixtures of the memory tests: made-up unit embeddings, on disk as the embed stage writes them."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import unit_rows


@pytest.fixture
def embeddings(tmp_path):
    """40 training inputs, 15 labels and 12 test queries of 8 dimensions in an embeddings folder."""
    rng = np.random.default_rng(3)
    (tmp_path / "embeddings").mkdir()
    for split, n in (("train", 40), ("labels", 15), ("test", 12)):
        np.save(tmp_path / "embeddings" / f"{split}.npy", unit_rows(rng, n, 8))
    return tmp_path / "embeddings"
