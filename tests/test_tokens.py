"""The tokenisation cache: ids match the tokenizer, reuse by key, rebuild on a changed key."""

from __future__ import annotations

import numpy as np
import pytest

from raexmc.data.dataset import Dataset
from raexmc.data.sources import build_dataset
from raexmc.encoder import load_tokenizer, resolve_encoder
from raexmc.errors import ConfigError
from raexmc.tokens import TokenCache, build_token_cache, text_of


@pytest.fixture
def tiny_dataset(lf_folder, tmp_path) -> Dataset:
    build_dataset("tiny", {"source": "local", "path": str(lf_folder)}, tmp_path / "tiny", "")
    return Dataset(tmp_path / "tiny")


def build(dataset, tokenizer, out, **overrides):
    settings = dict(input_max_len=8, label_max_len=4, input_fields="title+content", label_fields="title",
                    batch_size=3)
    settings.update(overrides)
    return build_token_cache(dataset, tokenizer, "tiny", out, **settings)


def test_ids_and_lengths_match_the_tokenizer(tiny_dataset, tiny_model, tmp_path):
    tokenizer = load_tokenizer(str(tiny_model))
    meta, reused = build(tiny_dataset, tokenizer, tmp_path / "tokens")
    assert not reused and meta["counts"] == {"train": 4, "test": 2, "labels": 5}
    cache = TokenCache(tmp_path / "tokens")
    for split, max_len, fields in (("train", 8, "title+content"), ("labels", 4, "title")):
        texts = [text_of(t, fields) for t in tiny_dataset.texts(split)]
        expected = tokenizer(texts, max_length=max_len, truncation=True, padding="max_length")
        assert cache.ids(split).tolist() == expected["input_ids"]
        assert cache.lengths(split).tolist() == [sum(m) for m in expected["attention_mask"]]
        assert cache.ids(split).dtype == np.uint16  # a 30k vocabulary fits 16 bits
    # "cpython the reference python implementation" fills 8 tokens: it was truncated
    assert meta["truncated"]["train"] > 0


def test_same_key_reuses_the_cache(tiny_dataset, tiny_model, tmp_path):
    tokenizer = load_tokenizer(str(tiny_model))
    build(tiny_dataset, tokenizer, tmp_path / "tokens")
    stamp = (tmp_path / "tokens" / "train.ids.npy").stat().st_mtime_ns
    _, reused = build(tiny_dataset, tokenizer, tmp_path / "tokens")
    assert reused and (tmp_path / "tokens" / "train.ids.npy").stat().st_mtime_ns == stamp


def test_changed_key_rebuilds(tiny_dataset, tiny_model, tmp_path):
    tokenizer = load_tokenizer(str(tiny_model))
    build(tiny_dataset, tokenizer, tmp_path / "tokens")
    meta, reused = build(tiny_dataset, tokenizer, tmp_path / "tokens", input_max_len=16)
    assert not reused and TokenCache(tmp_path / "tokens").ids("train").shape == (4, 16)
    assert meta["key"]["input_max_len"] == 16


def test_bad_fields_is_a_config_error(tiny_dataset, tiny_model, tmp_path):
    with pytest.raises(ConfigError, match="tokenize.label_fields"):
        build(tiny_dataset, load_tokenizer(str(tiny_model)), tmp_path / "tokens", label_fields="body")
    assert not (tmp_path / "tokens").exists()


def test_packaged_minilm_resolves_offline():
    folder = resolve_encoder("all-MiniLM-L6-v2")
    assert folder.endswith("model") and load_tokenizer("all-MiniLM-L6-v2").vocab_size == 30522


def test_unknown_encoder_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="encoder.name.*cannot load the tokenizer of"):
        load_tokenizer(str(tmp_path / "no-such-model"))
