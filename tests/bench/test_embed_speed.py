"""bench/embed_speed.py: the embed stage's loop timed on synthetic texts of the asked lengths."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import REPO, load_module


def test_synthetic_texts_have_lengths_in_the_asked_range(tmp_path):
    cache = load_module(REPO / "bench/common.py").synthetic_token_cache(tmp_path, {"labels": (500, 8, 32)}, 30522,
                                                                 np.random.default_rng(0))
    lengths = cache.lengths("labels")
    assert cache.ids("labels").shape == (500, 32)
    assert lengths.min() == 8 and lengths.max() == 32


@pytest.mark.slow  # several stage or torchrun processes: CI's second step
def test_a_run_appends_one_record_per_batch_size(tmp_path, tiny_model):
    out = tmp_path / "speed.json"
    proc = subprocess.run([sys.executable, str(REPO / "bench/embed_speed.py"), "--model", str(tiny_model),
                           "--texts", "40", "--min-tokens", "4", "--batch-sizes", "8,16", "--forward-seconds", "0.1",
                           "--device", "cpu", "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    records = json.loads(out.read_text())
    assert [r["batch_size"] for r in records] == [8, 16]
    assert all(r["texts"] == 40 and r["tokens_per_text"] == [4, 32] for r in records)
    assert all(np.isfinite(r["texts_per_s"]) and r["texts_per_s"] > 0 and r["forward_only_texts_per_s"] > 0
               for r in records)
