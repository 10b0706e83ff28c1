"""The tokenisation cache: ids match the tokenizer, reuse by key, rebuild on a changed key."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from raexmc.data.dataset import Dataset
from raexmc.data.sources import build_dataset
from raexmc.encoder.model import load_tokenizer, resolve_encoder
from raexmc.encoder.tokens import TokenCache, TokenizeSettings, build_token_cache, text_of
from raexmc.errors import ConfigError
from raexmc.params import Params, load_params

from conftest import REPO


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


BAD_SETTINGS = [
    ("input_max_len", -5, "must be at least 1, got -5"),
    ("label_max_len", 0, "must be at least 1, got 0"),
    ("batch_size", 0, "must be at least 1, got 0"),
    ("input_max_len", "64", "must be int, got '64'"),
    ("batch_size", 2.5, "must be int, got 2.5"),
    ("label_max_len", True, "must be int, got True"),
    ("input_fields", "body", "'body' is not one of title, title+content"),
    ("label_fields", None, "must be str, got None"),
    ("input_max_length", 64, "unknown parameter 'tokenize.input_max_length'"),
]


@pytest.mark.parametrize("key, value, fragment", BAD_SETTINGS)
def test_every_tokenize_value_is_checked_before_any_work(key, value, fragment):
    data = load_params(REPO / "params.yaml").data
    params = Params({**data, "tokenize": {**data["tokenize"], key: value}}, "params.yaml")
    with pytest.raises(ConfigError) as info:
        TokenizeSettings.from_params(params)
    assert (info.value.path, info.value.record) == ("params.yaml", f"tokenize.{key}")
    assert fragment in str(info.value)


def test_the_shipped_tokenize_params_pass():
    settings = TokenizeSettings.from_params(load_params(REPO / "params.yaml"))
    assert settings.input_max_len >= 1 and settings.input_fields in ("title", "title+content")


@pytest.mark.parametrize("key, value", [("input_max_len", 2), ("label_max_len", 513)])
def test_max_len_must_fit_the_tokenizer(tiny_dataset, tiny_model, tmp_path, key, value):
    # BERT's tokenizer adds [CLS] and [SEP] (so 2 tokens hold no text) and takes at most 512 tokens
    with pytest.raises(ConfigError, match=f"tokenize.{key}: 'tokenize.{key}' is {value}, but the tokenizer takes "
                                          "3 to 512 tokens"):
        build(tiny_dataset, load_tokenizer(str(tiny_model)), tmp_path / "tokens", **{key: value})
    assert not (tmp_path / "tokens").exists()


def test_stage_rejects_a_negative_max_len_in_one_line(tiny_dataset, tiny_model, tmp_path):
    text = (REPO / "params.yaml").read_text()
    assert "  input_max_len: 128" in text
    text = text.replace("  input_max_len: 128", "  input_max_len: -5", 1)
    (tmp_path / "params.yaml").write_text(text.replace("  name: all-MiniLM-L6-v2", f"  name: {tiny_model}", 1))
    out = tmp_path / "tokens"
    proc = subprocess.run([sys.executable, str(REPO / "stages/tokenize_texts.py"), "--dataset",
                           str(tiny_dataset.folder), "--out", str(out), "--params", str(tmp_path / "params.yaml")],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    # a fresh MLflow store logs its own creation; besides that, only the one error line
    assert [line for line in proc.stderr.splitlines() if " INFO mlflow." not in line] == [
        f"ConfigError: {tmp_path / 'params.yaml'}:tokenize.input_max_len: 'tokenize.input_max_len' must be at least 1, "
        "got -5"], proc.stderr
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_packaged_minilm_resolves_offline():
    folder = resolve_encoder("all-MiniLM-L6-v2")
    assert folder.endswith("model") and load_tokenizer("all-MiniLM-L6-v2").vocab_size == 30522


def test_unknown_encoder_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="encoder.name.*cannot load the tokenizer of"):
        load_tokenizer(str(tmp_path / "no-such-model"))
