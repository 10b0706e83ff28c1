"""scripts/make_tiny_encoder.py: a random BERT of the asked shape that raexmc loads, with the default encoder's
tokenizer."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from raexmc.encoder.model import load_tokenizer, tokenizer_fingerprint
from raexmc.encoder.sentence import load_encoder
from tests.helpers import REPO


def make(out, *args):
    return subprocess.run([sys.executable, str(REPO / "scripts/make_tiny_encoder.py"), "--out", str(out), *args],
                          capture_output=True, text=True)


def test_the_model_has_the_asked_shape_loads_through_raexmc_and_tokenizes_as_minilm_or_is_refused(tmp_path):
    out = tmp_path / "tiny"
    proc = make(out, "--hidden", "48", "--layers", "3", "--heads", "3", "--intermediate", "80", "--max-len", "64")
    assert proc.returncode == 0, proc.stderr

    model = load_encoder(str(out))
    config = model.transformer.config
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads, config.intermediate_size,
            config.max_position_embeddings) == (48, 3, 3, 80, 64)
    tokenizer = load_tokenizer(str(out))
    assert tokenizer_fingerprint(tokenizer) == tokenizer_fingerprint(load_tokenizer("all-MiniLM-L6-v2"))
    batch = tokenizer(["a unix-like kernel", "python"], padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model.transformer(**batch).last_hidden_state
    assert hidden.shape == (2, batch["input_ids"].shape[1], 48)
    proc = make(tmp_path / "odd", "--hidden", "64", "--heads", "3")  # a width the heads do not divide: nothing written
    assert proc.returncode == 2 and "--hidden 64 is not a multiple of --heads 3" in proc.stderr
    assert not (tmp_path / "odd").exists()


@pytest.mark.slow  # several stage or torchrun processes: CI's second step
def test_defaults_are_64_wide_2_layers_and_a_seed_fixes_the_weights(tmp_path):
    for name in ("a", "b"):
        assert make(tmp_path / name).returncode == 0
    a, b = load_encoder(str(tmp_path / "a")), load_encoder(str(tmp_path / "b"))
    assert (a.transformer.config.hidden_size, a.transformer.config.num_hidden_layers,
            a.transformer.config.num_attention_heads, a.transformer.config.intermediate_size) == (64, 2, 2, 256)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
