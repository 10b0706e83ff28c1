"""The tokenisation cache: ids match the tokenizer, reuse by key, rebuild on a changed key."""

from __future__ import annotations

import hashlib
import json
import pickle
import random
import string
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from raexmc.data.catalogue import catalogue, catalogue_dir
from raexmc.data.dataset import Dataset, Text
from raexmc.data.sources import build_dataset
from raexmc.encoder.model import load_tokenizer, resolve_encoder
from raexmc.encoder.tokens import (
    CHARS_PER_TOKEN,
    RightPaddedTokenizer,
    TokenCache,
    build_token_cache,
    record_input,
    text_of,
    tokenizer_input,
)
from raexmc.errors import ConfigError, DataError
from tests.helpers import REPO, TRAIN, make_lf_folder, peak_rss_of, write_jsonl_gz


def build(dataset, tokenizer, out, **overrides):
    settings = dict(input_max_len=8, label_max_len=4, input_fields="title+content", label_fields="title",
                    batch_size=3)
    settings.update(overrides)
    return build_token_cache(dataset, tokenizer, "tiny", out, **settings)


def test_ids_match_the_tokenizer_and_the_same_key_reuses_the_cache_and_a_changed_key_or_no_padding_mark_rebuilds(
        tiny_dataset, tiny_model, tmp_path):
    """Caches from before rows were always right-padded (no padding mark) may hold a left-padding tokenizer's rows."""
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
    stamp = (tmp_path / "tokens" / "train.ids.npy").stat().st_mtime_ns
    _, reused = build(tiny_dataset, tokenizer, tmp_path / "tokens")
    assert reused and (tmp_path / "tokens" / "train.ids.npy").stat().st_mtime_ns == stamp
    assert meta.pop("padding") == "right"
    (tmp_path / "tokens" / "meta.json").write_text(json.dumps(meta))
    meta, reused = build(tiny_dataset, tokenizer, tmp_path / "tokens")
    assert not reused and meta["padding"] == "right"
    meta, reused = build(tiny_dataset, tokenizer, tmp_path / "tokens", input_max_len=16)
    assert not reused and TokenCache(tmp_path / "tokens").ids("train").shape == (4, 16)
    assert meta["key"]["input_max_len"] == 16


def cache_files(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


@pytest.mark.parametrize("split_special_tokens", [False, True])
def test_one_worker_and_two_write_the_same_cache(tiny_model, tmp_path, split_special_tokens):
    """Blocks of 37 texts of a synthetic dataset, tokenised in this process or in two workers, give the same
    files; the workers' tokenizer keeps the setting its JSON leaves out (split_special_tokens)."""
    build_dataset("small", {**catalogue(catalogue_dir(REPO / "params.yaml"))["synthetic-small"],
                            "n_train": 500, "n_test": 100, "n_labels": 300}, tmp_path / "small", "")
    dataset = Dataset(tmp_path / "small")
    with open(dataset.text_path("train"), "a", encoding="utf-8") as handle:  # special-token text, split or not
        handle.write(json.dumps({"uid": "x", "title": "[CLS] hello [SEP] [MASK]", "content": ""}) + "\n")
    dataset.stats["N_train"] += 1
    tokenizer = load_tokenizer(str(tiny_model))
    tokenizer.split_special_tokens = split_special_tokens
    for workers in (1, 2):
        build(dataset, tokenizer, tmp_path / f"tokens{workers}", input_max_len=16, input_fields="title",
              batch_size=37, workers=workers)
    one, two = cache_files(tmp_path / "tokens1"), cache_files(tmp_path / "tokens2")
    assert one == two and len(one) == 7
    ids = TokenCache(tmp_path / "tokens2").ids("train")
    expected = tokenizer("[CLS] hello [SEP] [MASK]", max_length=16, truncation=True, padding="max_length")
    assert ids[-1].tolist() == expected["input_ids"]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_bad_line_is_a_data_error_naming_it_and_leaves_no_cache(tiny_dataset, tiny_model, tmp_path, workers):
    """A line that is not a text record fails in the worker that reads it; the error names the file and line."""
    path = tiny_dataset.text_path("labels")
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[3] = '{"uid": "l3", "title": "cut he\n'
    path.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(DataError) as raised:
        build(tiny_dataset, load_tokenizer(str(tiny_model)), tmp_path / "tokens", batch_size=2, workers=workers)
    assert str(raised.value) == f'DataError: {path}:4: not a text record {{"uid", "title", "content"}}: rerun the ' \
                                'download stage'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lf", "tiny"]  # no tokens folder, no temporary


def long_texts(tokenizer, count: int, seed: int, size: int) -> list[str]:
    """Texts of size / 2 to 3 x size characters: words of the vocabulary in mixed case, numbers, accents,
    CJK, runs of punctuation and whitespace, and words of up to 100 letters (cut by WordPiece into
    many pieces)."""
    rng = random.Random(seed)
    words = [w for w in tokenizer.get_vocab() if w.isalpha() and w.isascii()]
    extras = ["café", "naïve", "日本語", "1,234.5", "e-mail", "C++", "...", "(x)", "—", "Ünïcödé"]
    separators = [" ", " ", " ", ", ", ". ", "\n", "\t", "   ", " / "]
    texts = []
    for _ in range(count):
        parts, length, target = [], 0, rng.randint(size // 2, 3 * size)
        while length < target:
            kind = rng.random()
            if kind < 0.02:
                word = "".join(rng.choices(string.ascii_lowercase, k=rng.randint(20, 100)))
            elif kind < 0.1:
                word = rng.choice(extras)
            else:
                word = rng.choice(words)
                word = word.capitalize() if rng.random() < 0.2 else word
            parts.append(word + rng.choice(separators))
            length += len(parts[-1])
        texts.append("".join(parts))
    return texts


@pytest.mark.parametrize("max_len", [3, 8, 64, 512])
def test_cutting_a_text_to_its_budget_keeps_its_token_ids(tiny_model, max_len):
    tokenizer = load_tokenizer(str(tiny_model))
    budget = CHARS_PER_TOKEN * max_len
    texts = long_texts(tokenizer, 40, max_len, budget)
    # the worst case the budget is reasoned for: 100-character words (one [UNK] each: no emoji is in the
    # vocabulary) after 28 characters of space, so each token takes exactly CHARS_PER_TOKEN characters
    texts.append((" " * 28 + "\U0001F600" * 100) * 2 * max_len)
    cut = [tokenizer_input(text, max_len) for text in texts]
    assert [len(c) for c in cut] == [min(len(t), budget) for t in texts]
    assert sum(len(t) > budget for t in texts) > 20
    whole = tokenizer(texts, max_length=max_len, truncation=True)["input_ids"]
    assert tokenizer(cut, max_length=max_len, truncation=True)["input_ids"] == whole
    assert [tokenizer.unk_token_id] * (max_len - 2) == whole[-1][1:-1]


TRICKY = ["", "   ", "[PAD] [CLS] hello [SEP] x", "[MASK]", "Ünïcödé ß 東京 \U0001F642", "a " * 300,
          "C++ e-mail (x) ...", "one two three four five six seven eight nine ten", "short"]


@pytest.mark.parametrize("max_len, split, side", [(3, False, "right"), (8, True, "left"), (16, True, "right"),
                                                  (64, False, "left")])
def test_right_padded_ids_are_the_tokenizers_own(tiny_model, max_len, split, side):
    """Each text's ids are transformers' own call on the same tokenizer, padded on the right with its pad token
    whatever its padding_side (the encoder reads a row's first `length` ids), cut on its truncation_side, special-
    token text split as it says; so in a copy sent to a spawned worker (pickled), which keeps the setting the
    backend's JSON leaves out."""
    tokenizer = load_tokenizer(str(tiny_model))
    tokenizer.padding_side, tokenizer.truncation_side, tokenizer.split_special_tokens = "left", side, split
    texts = [*long_texts(tokenizer, 30, max_len, 4 * max_len), *TRICKY]
    own = [tokenizer(text, max_length=max_len, truncation=True)["input_ids"] for text in texts]
    tokenize = RightPaddedTokenizer(tokenizer, max_len)
    for tokenize in (tokenize, pickle.loads(pickle.dumps(tokenize))):
        for width, padded_to in ((max_len, max_len), (None, max(map(len, own)))):  # a cache's rows, or queries'
            ids, lengths = tokenize(texts, width=width)
            assert lengths.tolist() == [len(row) for row in own]
            assert ids.tolist() == [row + [tokenizer.pad_token_id] * (padded_to - len(row)) for row in own]
            assert ids.dtype == np.uint16 and lengths.dtype == np.int32
    assert (lengths[texts.index("[MASK]")] == 3) != split  # [CLS] [MASK] [SEP], or [MASK] cut into pieces
    first_word = ids[texts.index("one two three four five six seven eight nine ten"), 1]
    assert max_len > 12 or (first_word == tokenizer("one")["input_ids"][1]) == (side == "right")  # cut on its side


def test_rows_are_padded_with_the_tokenizers_pad_token_or_zero_without_one(tiny_model):
    tokenizer = load_tokenizer(str(tiny_model))
    for pad_token, pad_id in (("[MASK]", tokenizer.convert_tokens_to_ids("[MASK]")), (None, 0)):
        tokenizer.pad_token = pad_token
        ids, lengths = RightPaddedTokenizer(tokenizer, 8)(["a b", "a b c d e"], width=8)
        assert lengths.tolist() == [4, 7] and ids[0, 4:].tolist() == [pad_id] * 4


def test_a_record_is_cut_as_its_joined_text_would_be(tiny_model):
    """record_input cuts title and content before joining them; the result must be the joined text's cut."""
    budget = CHARS_PER_TOKEN * 8
    texts = long_texts(load_tokenizer(str(tiny_model)), 12, 1, 2 * budget)  # around the fields' limit, 2 budgets
    fields = [*texts, "jython", "", "   "]
    pads = ["", " ", "\n\t ", " " * 300]
    records = [Text("r", lead + title + trail, lead + content + trail)
               for title, content in zip(fields, reversed(fields)) for lead in pads for trail in pads]
    for recipe in ("title", "title+content"):
        assert ([record_input(r, recipe, 8) for r in records]
                == [tokenizer_input(text_of(r, recipe), 8) for r in records])


@pytest.mark.parametrize("name, value", [("truncation_side", "left"), ("split_special_tokens", True)])
def test_a_tokenizer_setting_that_changes_the_ids_rebuilds_the_cache(tiny_dataset, tiny_model, tmp_path, name, value):
    """Both settings live in tokenizer_config.json, outside the backend's definition; a cache built before one changed
    must not be reused. At their defaults they add nothing: the fingerprint is then the plain hash of the definition
    less its call-time padding and truncation, as caches made before these settings counted were keyed."""
    tokenizer = load_tokenizer(str(tiny_model))
    definition = json.loads(tokenizer.backend_tokenizer.to_str())
    del definition["padding"], definition["truncation"]
    plain = hashlib.sha256(json.dumps(definition, sort_keys=True).encode("utf-8")).hexdigest()[:16]
    meta, _ = build(tiny_dataset, tokenizer, tmp_path / "tokens")
    assert meta["key"]["fingerprint"] == plain
    before = TokenCache(tmp_path / "tokens").ids("train").copy()
    setattr(tokenizer, name, value)
    meta, reused = build(tiny_dataset, tokenizer, tmp_path / "tokens")
    assert not reused and meta["key"]["fingerprint"] != plain
    changed = TokenCache(tmp_path / "tokens").ids("train")
    texts = [record_input(record, "title+content", 8) for record in tiny_dataset.texts("train")]
    assert changed.tolist() == RightPaddedTokenizer(tokenizer, 8)(texts, width=8)[0].tolist()
    assert (changed != before).any() or name == "split_special_tokens"  # no special-token text in the tiny data


# BERT's tokenizer adds [CLS] and [SEP] (so 2 tokens hold no text) and takes at most 512 tokens; text fields the
# settings would refuse are a programming error
@pytest.mark.parametrize("overrides, error, says", [
    ({"label_fields": "body"}, ValueError, "title or title\\+content, not 'title\\+content' and 'body'"),
    *(({key: value}, ConfigError, f"tokenize.{key}: 'tokenize.{key}' is {value}, but the tokenizer takes 3 to 512 "
                                  "tokens") for key, value in (("input_max_len", 2), ("label_max_len", 513)))])
def test_text_fields_or_a_max_len_the_tokenizer_cannot_take_are_refused(tiny_dataset, tiny_model, tmp_path,
                                                                         overrides, error, says):
    with pytest.raises(error, match=says):
        build(tiny_dataset, load_tokenizer(str(tiny_model)), tmp_path / "tokens", **overrides)
    assert not (tmp_path / "tokens").exists()


def stage_params(folder: Path, tiny_model: Path, input_max_len: int) -> Path:
    """The project's params.yaml with the tiny encoder and the given tokenize.input_max_len."""
    text = (REPO / "params.yaml").read_text()
    assert "  input_max_len: 128" in text
    text = text.replace("  input_max_len: 128", f"  input_max_len: {input_max_len}", 1)
    (folder / "params.yaml").write_text(text.replace("  name: all-MiniLM-L6-v2", f"  name: {tiny_model}", 1))
    return folder / "params.yaml"


def failed_stage_lines(dataset: Dataset, folder: Path) -> list[str]:
    """What the tokenize stage prints when it fails with folder/params.yaml, less the log lines a fresh MLflow store
    writes about its own creation; checks the exit status 2 and that no cache was left behind."""
    out = folder / "tokens"
    proc = subprocess.run([sys.executable, str(REPO / "stages/tokenize_texts.py"), "--dataset", str(dataset.folder),
                           "--out", str(out), "--params", str(folder / "params.yaml")],
                          cwd=folder, capture_output=True, text=True)
    assert proc.returncode == 2 and not out.exists(), proc.stderr
    return [line for line in proc.stderr.splitlines() if " INFO mlflow." not in line]


def test_the_stage_refuses_a_negative_max_len_or_a_tokenizer_without_a_fast_version_in_one_line(
        tiny_dataset, tiny_model, tmp_path):
    """ByT5's tokenizer exists only in Python; the cache calls the Rust backend, which it lacks."""
    from transformers import ByT5Tokenizer

    stage_params(tmp_path, tiny_model, -5)
    assert failed_stage_lines(tiny_dataset, tmp_path) == [
        f"ConfigError: {tmp_path / 'params.yaml'}:tokenize.input_max_len: must be greater than or equal to 1, got -5"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []

    folder = tmp_path / "byt5"
    ByT5Tokenizer().save_pretrained(folder)
    with pytest.raises(DataError, match="ByT5Tokenizer has no fast"):
        load_tokenizer(str(folder), stage_output=True)
    stage_params(tmp_path, folder, 16)
    assert failed_stage_lines(tiny_dataset, tmp_path) == [
        f"ConfigError: {tmp_path / 'params.yaml'}:encoder.name: the tokenizer of '{folder}': ByT5Tokenizer has no "
        "fast (Rust) tokenizer, which rae-xmc needs; choose an encoder that ships a tokenizer.json"]


def test_packaged_minilm_resolves_offline_and_an_unknown_encoder_is_a_config_error(tmp_path):
    folder = resolve_encoder("all-MiniLM-L6-v2")
    assert folder.endswith("model") and load_tokenizer("all-MiniLM-L6-v2").vocab_size == 30522
    with pytest.raises(ConfigError, match="encoder.name.*cannot load the tokenizer of"):
        load_tokenizer(str(tmp_path / "no-such-model"))


def test_tokenize_memory_does_not_grow_with_the_longest_text(tiny_model, tmp_path):
    """One 10 MB text once took the stage from 0.46 to 1.6 GB; what is left is reading it (~3 copies)."""
    params = stage_params(tmp_path, tiny_model, 16)
    clean = make_lf_folder(tmp_path / "clean")
    huge = make_lf_folder(tmp_path / "huge")
    records = [{"uid": u, "title": t, "content": c, "target_ind": i} for u, t, c, i, _ in TRAIN]
    records.append({"uid": "big", "title": "a dump", "content": "python unix compiler " * 500_000,  # 10.5 MB
                    "target_ind": [0]})
    write_jsonl_gz(huge / "trn.json.gz", records)
    peaks = {}
    for name, folder in (("clean", clean), ("huge", huge)):
        build_dataset("tiny", {"source": "local", "path": str(folder)}, tmp_path / name / "data", "")
        peaks[name] = peak_rss_of([sys.executable, str(REPO / "stages/tokenize_texts.py"), "--dataset",
                                   str(tmp_path / name / "data"), "--out", str(tmp_path / name / "tokens"),
                                   "--params", str(params)], tmp_path)
    clean_mib, huge_mib = peaks["clean"] / 2**20, peaks["huge"] / 2**20
    assert huge_mib - clean_mib < 50, f"peak RSS {clean_mib:.0f} MiB clean, {huge_mib:.0f} MiB with one 10 MB text"
