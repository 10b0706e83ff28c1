"""Fine-tune the shared encoder with decoupled InfoNCE, hard negatives and in-batch instance
negatives, on one CPU, one GPU or many (torchrun).

Every rank draws the same global batch (the sampler is seeded by step), encodes its share of the
batch's inputs and labels, and gathers the embeddings with gradients so negatives span the global
batch. Every rank then computes the same loss; gradients are summed across ranks in one flat
all-reduce. Resuming needs no sampler state: step, model, optimizer, scheduler, mined negatives
and torch's RNG are in the checkpoint.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
import torch.distributed as dist
from tqdm import tqdm

from .device import autocast
from .distributed import DistContext, gather_array, gather_with_grad, pad_to_multiple, shard
from .embedding import batch_tensors, embed_rows, length_sorted_batches
from .encoder import encode
from .evaluation import Evaluator, Retrievals, method_scorers
from .index import ExactIndex
from .loss import batch_label_masks, decoupled_infonce, shared_label_mask
from .memory import training_values
from .mining import sample_negatives
from .tokens import TokenCache


@dataclass
class TrainSettings:
    batch_size: int = 32            # inputs per device; the global batch is this times the world size
    lr: float = 1e-4
    max_steps: int = 300
    warmup_steps: int = 30
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    tau: float = 0.04
    hnm_steps: int = 100
    hnm_topk: int = 50
    num_hard_negatives: int = 2
    hard_negatives: bool = True
    instance_negatives: bool = True
    val_fraction: float = 0.05
    val_b: int = 200
    val_lambda: float = 0.5
    checkpoint_every: int = 50
    embed_batch_size: int = 256
    seed: int = 0


def split_validation(Y: sp.csr_matrix, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, validation rows) of the training inputs: validation is never the test set."""
    order = np.random.default_rng([seed, 7]).permutation(Y.shape[0])
    n_val = int(round(Y.shape[0] * fraction))
    return np.sort(order[n_val:]), np.sort(order[:n_val])


class BatchSampler:
    """The global batch of each step and one sampled positive per input, identical on every rank."""

    def __init__(self, Y: sp.csr_matrix, rows: np.ndarray, seed: int):
        self.Y, self.seed = Y, seed
        self.rows = rows[np.diff(Y.indptr)[rows] > 0]
        if len(self.rows) == 0:
            raise ValueError("no training input has a label")

    def batch(self, step: int, size: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng([self.seed, step])
        rows = rng.choice(self.rows, size=size, replace=size > len(self.rows))
        degree = np.diff(self.Y.indptr)[rows]
        picks = self.Y.indptr[rows] + (rng.random(size) * degree).astype(np.int64)
        return rows, self.Y.indices[picks].astype(np.int64)


def linear_schedule(warmup: int, total: int) -> Callable[[int], float]:
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / max(warmup, 1)
        return max(0.0, (total - step) / max(total - warmup, 1))
    return factor


def embed_all(model, ids: np.ndarray, lengths: np.ndarray, batch_size: int, ctx: DistContext, precision: str) -> np.ndarray:
    """Embeddings of every row, each rank encoding its share (length-sorted batches), gathered."""
    count = len(lengths)
    padded = pad_to_multiple(np.arange(count), ctx.world_size)
    mine = shard(padded, ctx)
    local = np.zeros((len(mine), model.config.hidden_size), np.float32)
    for batch in tqdm(length_sorted_batches(np.asarray(lengths)[mine], batch_size), desc="re-embed",
                      unit="batch", disable=not ctx.is_main, mininterval=2.0, leave=False):
        local[batch] = embed_rows(model, ids, lengths, mine[batch], ctx.device, precision)
    gathered = gather_array(torch.from_numpy(local).to(ctx.device), ctx).cpu().numpy()
    out = np.zeros((count, local.shape[1]), np.float32)
    out[padded] = gathered  # shards are contiguous slices of `padded`, gathered in rank order
    return out


def top_k_search(keys: np.ndarray, device: str) -> Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]:
    """Exact top-k by inner product: a torch matrix product on the GPU, ExactIndex on the CPU."""
    if not device.startswith("cuda"):
        return ExactIndex(keys).search
    key_tensor = torch.from_numpy(keys).to(device)

    def search(queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        ids, sims = [], []
        for start in range(0, len(queries), 4096):
            scores = torch.from_numpy(queries[start:start + 4096]).to(device) @ key_tensor.T
            top = torch.topk(scores, min(k, key_tensor.shape[0]), dim=1)
            ids.append(top.indices.cpu().numpy())
            sims.append(top.values.float().cpu().numpy())
        return np.vstack(ids).astype(np.int64), np.vstack(sims)
    return search


@dataclass
class RoundResult:
    negatives: np.ndarray
    validation: dict[str, float]


def mining_round(model, cache: TokenCache, Y: sp.csr_matrix, filters: sp.csr_matrix, train_rows: np.ndarray,
                 val_rows: np.ndarray, settings: TrainSettings, ctx: DistContext, precision: str, round_no: int,
                 propensity_ab: tuple[float, float]) -> RoundResult:
    """Re-embed inputs and labels with the current encoder; mine hard negatives; validate P@1."""
    model.eval()
    inputs = embed_all(model, cache.ids("train"), cache.lengths("train"), settings.embed_batch_size, ctx, precision)
    labels = embed_all(model, cache.ids("labels"), cache.lengths("labels"), settings.embed_batch_size, ctx, precision)
    model.train()
    negatives = np.full((Y.shape[0], settings.num_hard_negatives), -1, np.int64)
    if settings.hard_negatives:
        candidates, _ = top_k_search(labels, ctx.device)(inputs, settings.hnm_topk)
        negatives = sample_negatives(candidates, Y, settings.num_hard_negatives,
                                     np.random.default_rng([settings.seed, 1000 + round_no]))
    validation = {}
    if len(val_rows):
        validation = validate(inputs, labels, Y, filters, train_rows, val_rows, settings, ctx.device, propensity_ab)
    return RoundResult(negatives, validation)


def validate(inputs: np.ndarray, labels: np.ndarray, Y: sp.csr_matrix, filters: sp.csr_matrix,
             train_rows: np.ndarray, val_rows: np.ndarray, settings: TrainSettings, device: str,
             propensity_ab: tuple[float, float]) -> dict[str, float]:
    """Validation P@1 of RAE, the dual encoder and kNN, each from its own exact search, with the
    remaining training inputs as the memory (as the evaluate stage does for the test set)."""
    queries, memory_inputs = inputs[val_rows], inputs[train_rows]
    searches = {"joint": np.vstack([memory_inputs, labels]), "labels": labels, "inputs": memory_inputs}
    retrievals = Retrievals(**{name: top_k_search(keys, device)(queries, settings.val_b)
                               for name, keys in searches.items()})
    values = training_values(Y[train_rows])
    evaluator = Evaluator(values, Y[val_rows], filters[val_rows], propensity_ab)
    scorers = method_scorers(retrievals, values, settings.val_lambda, settings.tau, settings.val_b)
    return {f"val_{name}_P@1": evaluator.summary(evaluator.rank(len(val_rows), scorer))[0]["P@1"]
            for name, scorer in scorers.items()}


def _all_reduce_gradients(params: list[torch.nn.Parameter], ctx: DistContext) -> None:
    """Sum gradients across ranks in one flat buffer (every rank computed the same global loss,
    and each back-propagated through its own encodings only, so the sum is the full gradient)."""
    if not ctx.active:
        return
    grads = [p.grad for p in params if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def training_step(model, cache: TokenCache, Y: sp.csr_matrix, rows: np.ndarray, positives: np.ndarray,
                  negatives: np.ndarray, settings: TrainSettings, ctx: DistContext, precision: str) -> torch.Tensor:
    """Loss of one global batch, computed identically on every rank (backward not called)."""
    chosen = negatives[rows].ravel()
    label_ids = np.unique(np.concatenate([positives, chosen[chosen >= 0]]))
    padded_labels = pad_to_multiple(label_ids, ctx.world_size)
    with autocast(ctx.device, precision):
        x_local = encode(model, *batch_tensors(cache.ids("train"), cache.lengths("train"), shard(rows, ctx), ctx.device))
        z_local = encode(model, *batch_tensors(cache.ids("labels"), cache.lengths("labels"), shard(padded_labels, ctx),
                                               ctx.device))
    x = gather_with_grad(x_local, ctx)
    z = gather_with_grad(z_local, ctx)[: len(label_ids)]
    batch_labels = Y[rows]
    is_positive = batch_label_masks(batch_labels, label_ids).to(ctx.device)
    positive_col = torch.from_numpy(np.searchsorted(label_ids, positives)).to(ctx.device)
    share = shared_label_mask(batch_labels).to(ctx.device) if settings.instance_negatives else None
    return decoupled_infonce(x, z, positive_col, is_positive, share, settings.tau)


def apply_gradients(loss: torch.Tensor, params: list[torch.nn.Parameter], optimizer: torch.optim.Optimizer,
                    scheduler: torch.optim.lr_scheduler.LRScheduler, grad_clip: float, ctx: DistContext) -> None:
    """Back-propagate one step's loss, sum gradients across ranks, clip, and step optimizer and schedule."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    _all_reduce_gradients(params, ctx)
    torch.nn.utils.clip_grad_norm_(params, grad_clip)
    optimizer.step()
    scheduler.step()


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def train(model, cache: TokenCache, Y: sp.csr_matrix, filters: sp.csr_matrix, settings: TrainSettings,
          ctx: DistContext, precision: str, checkpoint: Path, propensity_ab: tuple[float, float],
          log: Callable[[int, dict[str, float]], None], fingerprint: str = "") -> list[dict[str, float]]:
    """Train `model` in place for settings.max_steps, resuming from `checkpoint` if it exists.

    `log(step, metrics)` is called on rank 0 at every mining round (loss, lr, examples/s,
    validation P@1 of RAE, λ=0 and λ=1, elapsed seconds). A checkpoint is resumed only when its
    `fingerprint` (settings, encoder, data) matches. Returns every logged row as {"step", ...},
    those of an interrupted earlier run included (they travel in the checkpoint).
    """
    torch.manual_seed(settings.seed)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=settings.lr, weight_decay=settings.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, linear_schedule(settings.warmup_steps, settings.max_steps))
    train_rows, val_rows = split_validation(Y, settings.val_fraction, settings.seed)
    sampler = BatchSampler(Y, train_rows, settings.seed)
    global_batch = settings.batch_size * ctx.world_size
    start_step, negatives, elapsed, history = 0, None, 0.0, []
    state = torch.load(checkpoint, map_location=ctx.device, weights_only=False) if checkpoint.is_file() else None
    if state is not None and state.get("fingerprint") == fingerprint:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        start_step, negatives, elapsed = state["step"], state["negatives"], state["elapsed_s"]
        history = state.get("history", [])
        if ctx.is_main:
            print(f"resuming from {checkpoint} at step {start_step}", file=sys.stderr)

    def record(step: int, values: dict[str, float]) -> None:
        history.append({"step": step, **values})
        log(step, values)

    model.train()
    progress = tqdm(total=settings.max_steps, initial=start_step, desc="train", unit="step", disable=not ctx.is_main,
                    mininterval=2.0)
    started, window_start, window_loss, window_steps = time.perf_counter() - elapsed, time.perf_counter(), 0.0, 0
    for step in range(start_step, settings.max_steps):
        if negatives is None or step % settings.hnm_steps == 0:
            result = mining_round(model, cache, Y, filters, train_rows, val_rows, settings, ctx, precision,
                                  step // settings.hnm_steps, propensity_ab)
            negatives = result.negatives
            if ctx.is_main and step > start_step:
                seconds = time.perf_counter() - window_start
                record(step, {"loss": window_loss / max(window_steps, 1), "lr": scheduler.get_last_lr()[0],
                           "examples_per_s": window_steps * global_batch / max(seconds, 1e-9),
                           "elapsed_s": time.perf_counter() - started, **result.validation})
            elif ctx.is_main:
                record(step, {"elapsed_s": time.perf_counter() - started, **result.validation})
            window_start, window_loss, window_steps = time.perf_counter(), 0.0, 0
        rows, positives = sampler.batch(step, global_batch)
        loss = training_step(model, cache, Y, rows, positives, negatives, settings, ctx, precision)
        apply_gradients(loss, params, optimizer, scheduler, settings.grad_clip, ctx)
        step_loss = float(loss.detach())
        window_loss += step_loss
        window_steps += 1
        progress.update(1)
        progress.set_postfix(loss=f"{step_loss:.3f}", refresh=False)
        done = step + 1
        if ctx.is_main and (done % settings.checkpoint_every == 0 or done == settings.max_steps):
            save_checkpoint(checkpoint, {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                         "scheduler": scheduler.state_dict(), "torch_rng": torch.get_rng_state(),
                                         "step": done, "negatives": negatives, "fingerprint": fingerprint,
                                         "elapsed_s": time.perf_counter() - started, "history": history})
    progress.close()
    if settings.max_steps > start_step:  # a last round on every rank: it gathers across ranks
        result = mining_round(model, cache, Y, filters, train_rows, val_rows, settings, ctx, precision,
                              settings.max_steps // settings.hnm_steps + 1, propensity_ab)
        if ctx.is_main:
            record(settings.max_steps, {"loss": window_loss / max(window_steps, 1),
                                     "elapsed_s": time.perf_counter() - started, **result.validation})
    return history
