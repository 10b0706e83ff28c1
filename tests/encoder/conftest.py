"""Fixtures of the encoder tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from raexmc.data.dataset import Dataset
from raexmc.data.sources import build_dataset
from raexmc.encoder.model import load_tokenizer
from raexmc.encoder.tokens import build_token_cache


@pytest.fixture
def tiny_dataset(lf_folder, tmp_path) -> Dataset:
    """The download stage's folder of the tiny LF dataset."""
    build_dataset("tiny", {"source": "local", "path": str(lf_folder)}, tmp_path / "tiny", "")
    return Dataset(tmp_path / "tiny")


@pytest.fixture
def token_cache(tiny_dataset, tiny_model, tmp_path) -> Path:
    """The token cache of the tiny LF dataset (inputs as title+content, 16 tokens; labels as title, 8)."""
    build_token_cache(tiny_dataset, load_tokenizer(str(tiny_model)), "tiny", tmp_path / "tokens", 16, 8,
                      "title+content", "title")
    return tmp_path / "tokens"
