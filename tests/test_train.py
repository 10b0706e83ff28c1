"""Training: the loss goes down on a tiny problem, checkpoints resume to the same weights, and a
real 2-process gloo group ends with identical weights on both ranks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from conftest import free_port
from raexmc.data.dataset import Dataset
from raexmc.data.sources import build_dataset
from raexmc.distributed import DistContext
from raexmc.encoder import load_encoder, load_tokenizer
from raexmc.tokens import TokenCache, build_token_cache
from raexmc.train import BatchSampler, TrainSettings, linear_schedule, split_validation, train


SINGLE = DistContext(0, 1, "cpu")


@pytest.fixture
def tiny(lf_folder, tiny_model, tmp_path):
    build_dataset("tiny", {"source": "local", "path": str(lf_folder)}, tmp_path / "tiny", "")
    dataset = Dataset(tmp_path / "tiny")
    build_token_cache(dataset, load_tokenizer(str(tiny_model)), "tiny", tmp_path / "tokens", 16, 8,
                      "title+content", "title")
    return dataset, TokenCache(tmp_path / "tokens")


def settings(**overrides) -> TrainSettings:
    base = dict(batch_size=4, lr=1e-3, max_steps=6, warmup_steps=1, hnm_steps=3, hnm_topk=3, num_hard_negatives=1,
                val_fraction=0.25, val_b=10, checkpoint_every=2, embed_batch_size=4)
    base.update(overrides)
    return TrainSettings(**base)


def run_training(tiny, tiny_model, checkpoint: Path, **overrides):
    dataset, cache = tiny
    torch.manual_seed(0)
    model = load_encoder(str(tiny_model))
    logged = []
    history = train(model, cache, dataset.label_matrix("train"), dataset.filter_matrix("train"),
                    settings(**overrides), SINGLE, "fp32", checkpoint, (0.55, 1.5),
                    lambda step, values: logged.append((step, values)), "fp")
    assert [row["step"] for row in history][-len(logged):] == [step for step, _ in logged]
    return model, logged, history


def test_sampler_is_deterministic_per_step_and_skips_unlabelled_inputs():
    Y = sp.csr_matrix(np.array([[1, 0, 1], [0, 0, 0], [0, 1, 0]], dtype=np.float32))
    sampler = BatchSampler(Y, np.arange(3), seed=1)
    rows, positives = sampler.batch(5, 8)
    again = sampler.batch(5, 8)
    assert (rows == again[0]).all() and (positives == again[1]).all()
    assert 1 not in rows
    assert all(Y[r, p] == 1 for r, p in zip(rows, positives))


def test_schedule_warms_up_then_decays_to_zero():
    factor = linear_schedule(2, 10)
    assert [round(factor(s), 3) for s in (0, 1, 2, 6, 10)] == [0.5, 1.0, 1.0, 0.5, 0.0]


def test_validation_is_carved_from_training_inputs():
    Y = sp.csr_matrix(np.eye(20, dtype=np.float32))
    train_rows, val_rows = split_validation(Y, 0.25, 0)
    assert len(val_rows) == 5 and not set(train_rows) & set(val_rows) and len(train_rows) + 5 == 20


def test_training_lowers_the_loss_and_logs_validation(tiny, tiny_model, tmp_path):
    model, logged, _ = run_training(tiny, tiny_model, tmp_path / "ckpt.pt", max_steps=12, hnm_steps=4)
    losses = [values["loss"] for step, values in logged if "loss" in values]
    assert losses[-1] < losses[0], logged
    assert {"val_rae_P@1", "val_dual_encoder_P@1", "val_knn_P@1", "elapsed_s"} <= set(logged[-1][1])
    assert (tmp_path / "ckpt.pt").is_file()


class Killed(Exception):
    pass


def test_resume_reaches_the_same_weights_and_keeps_the_whole_curve(tiny, tiny_model, tmp_path):
    full, _, full_history = run_training(tiny, tiny_model, tmp_path / "full.pt")
    dataset, cache = tiny

    def die_at_step_3(step, values):  # the round at step 3 comes after the checkpoint of step 2
        if step == 3:
            raise Killed

    torch.manual_seed(0)
    with pytest.raises(Killed):
        train(load_encoder(str(tiny_model)), cache, dataset.label_matrix("train"), dataset.filter_matrix("train"),
              settings(), SINGLE, "fp32", tmp_path / "part.pt", (0.55, 1.5), die_at_step_3, "fp")
    assert torch.load(tmp_path / "part.pt", weights_only=False)["step"] == 2
    resumed, logged, history = run_training(tiny, tiny_model, tmp_path / "part.pt")
    assert logged[0][0] == 3, "resumed from step 2, first round at step 3"
    assert [row["step"] for row in history] == [row["step"] for row in full_history] == [0, 3, 6]
    for (name, a), (_, b) in zip(full.state_dict().items(), resumed.state_dict().items()):
        assert torch.allclose(a, b, atol=1e-6), name


def test_a_changed_fingerprint_starts_over(tiny, tiny_model, tmp_path):
    run_training(tiny, tiny_model, tmp_path / "ckpt.pt", max_steps=2)
    dataset, cache = tiny
    logged = []
    train(load_encoder(str(tiny_model)), cache, dataset.label_matrix("train"), dataset.filter_matrix("train"),
          settings(max_steps=2), SINGLE, "fp32", tmp_path / "ckpt.pt", (0.55, 1.5),
          lambda step, values: logged.append(step), "other settings")
    assert logged[0] == 0


WORKER = """
import sys, torch
from pathlib import Path
from raexmc.data.dataset import Dataset
from raexmc.distributed import init_distributed, shutdown
from raexmc.encoder import load_encoder
from raexmc.tokens import TokenCache
from raexmc.train import TrainSettings, train

data, tokens, model_dir, out = sys.argv[1:5]
ctx = init_distributed("cpu")
torch.manual_seed(0)
model = load_encoder(model_dir)
dataset = Dataset(data)
settings = TrainSettings(batch_size=2, lr=1e-3, max_steps=4, warmup_steps=1, hnm_steps=2, hnm_topk=3,
                         num_hard_negatives=1, val_fraction=0.25, val_b=10, checkpoint_every=2, embed_batch_size=3)
train(model, TokenCache(tokens), dataset.label_matrix("train"), dataset.filter_matrix("train"), settings, ctx,
      "fp32", Path(out) / "ckpt.pt", (0.55, 1.5), lambda *a: None, "fp")
torch.save(model.state_dict(), Path(out) / f"rank{ctx.rank}.pt")
shutdown(ctx)
"""


def test_two_process_gloo_training_keeps_ranks_identical(tiny, tiny_model, tmp_path):
    dataset, cache = tiny
    (tmp_path / "worker.py").write_text(WORKER)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                           f"--master_port={free_port()}",
                           str(tmp_path / "worker.py"), str(dataset.folder), str(cache.folder), str(tiny_model),
                           str(tmp_path)], capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rank0, rank1 = (torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1))
    initial = load_encoder(str(tiny_model)).state_dict()
    changed = 0
    for name in rank0:
        assert torch.equal(rank0[name], rank1[name]), name
        changed += not torch.equal(rank0[name], initial[name])
    assert changed > 0, "training must have moved the weights"
