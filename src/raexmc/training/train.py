"""Fine-tune the shared encoder with decoupled InfoNCE, hard negatives and in-batch instance
negatives, on one CPU, one GPU or many (torchrun).

Every rank draws the same global batch (the sampler is seeded by step), encodes its share of the
batch's inputs and labels, and gathers the embeddings so negatives span the global batch. Every
rank then computes the same loss and back-propagates it through its own encodings only; one flat
all-reduce sums those shares into the gradient one process would get on the same batch. With
gradient caching the encoder holds the graph of only `grad_cache_chunk` texts at a time.
Resuming needs no sampler state: step, model, optimizer, scheduler, mined negatives and torch's
RNG are in the checkpoint.
"""

from __future__ import annotations

import math
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
import torch.distributed as dist
from tqdm import tqdm

from ..encoder.device import PRECISIONS, autocast
from ..encoder.embedding import batch_tensors, embed_rows, encode, length_sorted_batches
from ..encoder.tokens import TokenCache
from ..errors import ConfigError
from ..evaluation.evaluator import Evaluator, Retrievals, method_scorers
from ..memory.exact import ExactIndex
from ..memory.keys_values import training_values
from ..params import Params
from .distributed import DistContext, gather_array, gather_with_grad, pad_to_multiple, shard
from .loss import batch_label_masks, decoupled_infonce, shared_label_mask
from .mining import sample_negatives


@dataclass(frozen=True)
class Rule:
    """What one `train.*` value must be: its type(s), and its range in words and as a test."""
    kind: type | tuple[type, ...]
    text: str
    ok: Callable[[Any], bool] = lambda value: True


def _setting(kind: type, text: str, ok: Callable[[Any], bool] = lambda value: True) -> Any:
    """A TrainSettings field and its rule; no default, since params.yaml is where defaults live."""
    return field(metadata={"rule": Rule(kind, text, ok)})


def _at_least(low: int) -> Any:
    return _setting(int, f"an integer >= {low}", lambda value: value >= low)


def _positive() -> Any:
    return _setting(float, "a finite number > 0", lambda value: 0 < value < math.inf)


def _fraction() -> Any:
    return _setting(float, "a number in [0, 1]", lambda value: 0 <= value <= 1)


def _switch() -> Any:
    return _setting(bool, "true or false")


# Keys of the `train` section that start processes rather than shape the recipe: the stage reads
# them, and they stay out of TrainSettings (so out of the checkpoint's fingerprint).
LAUNCH_RULES = {
    "nproc": Rule((str, int), "'auto' or an integer >= 1",
                  lambda value: value == "auto" or (isinstance(value, int) and value >= 1)),
    "torchrun_args": Rule(str, "a string of torchrun arguments"),
    "device": Rule(str, "auto, cpu, cuda or cuda:N", lambda value: re.fullmatch(r"auto|cpu|cuda(:\d+)?", value)),
    "precision": Rule(str, f"one of {', '.join(PRECISIONS)}", lambda value: value in PRECISIONS),
}


@dataclass(frozen=True)
class TrainSettings:
    """The training recipe: the `train` section of params.yaml less its launch keys.

    No defaults here: params.yaml is the one place they live. The pipeline builds this with
    `from_params`, which checks every value before any work; tests and benchmarks start from
    that and `dataclasses.replace` what they vary.
    """
    batch_size: int = _at_least(1)           # inputs per device; the global batch is this times the world size
    grad_cache_chunk: int = _at_least(0)     # texts per encoder pass with gradient caching; 0 = off
    lr: float = _positive()
    max_steps: int = _at_least(1)
    warmup_steps: int = _at_least(0)
    weight_decay: float = _setting(float, "a number >= 0", lambda value: value >= 0)
    grad_clip: float = _setting(float, "a number > 0 (.inf: no clipping)", lambda value: value > 0)
    tau: float = _positive()
    hnm_steps: int = _at_least(1)
    hnm_topk: int = _at_least(1)
    num_hard_negatives: int = _at_least(0)
    hard_negatives: bool = _switch()
    instance_negatives: bool = _switch()
    val_fraction: float = _setting(float, "a number in [0, 1)", lambda value: 0 <= value < 1)
    val_b: int = _at_least(1)
    val_lambda: float = _fraction()
    checkpoint_every: int = _at_least(1)
    embed_batch_size: int = _at_least(1)
    seed: int = _at_least(0)

    @classmethod
    def from_params(cls, p: Params) -> TrainSettings:
        """The recipe of params.yaml's `train` section. Every key there, launch keys included, is
        checked for type and range; an unknown key is an error, not silently dropped."""
        rules = {**LAUNCH_RULES, **{f.name: f.metadata["rule"] for f in fields(cls)}}
        for key in p.section("train"):
            if key not in rules:
                raise ConfigError(f"unknown parameter (the train section knows {', '.join(rules)})", p.path,
                                  f"train.{key}")
        values = {}
        for key, rule in rules.items():
            value = p.typed(f"train.{key}", rule.kind)  # missing, or the wrong type: ConfigError
            if not rule.ok(value):
                raise ConfigError(f"must be {rule.text}, got {value!r}", p.path, f"train.{key}")
            values[key] = value
        return cls(**{f.name: values[f.name] for f in fields(cls)})


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


@dataclass
class BatchPlan:
    """One global batch as this rank sees it: the rows it encodes, and what the loss needs.

    Labels are padded to equal shares (padding rows are encoded but cut off before the loss).
    """
    input_rows: np.ndarray      # this rank's share of the batch's inputs
    label_rows: np.ndarray      # this rank's share of the batch's distinct labels, padded
    n_labels: int
    positive_col: torch.Tensor
    is_positive: torch.Tensor
    share: torch.Tensor | None
    tau: float

    def loss(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """Decoupled InfoNCE of the gathered input and (padded) label embeddings."""
        return decoupled_infonce(x, z[: self.n_labels], self.positive_col, self.is_positive, self.share, self.tau)


def plan_batch(Y: sp.csr_matrix, rows: np.ndarray, positives: np.ndarray, negatives: np.ndarray,
               settings: TrainSettings, ctx: DistContext) -> BatchPlan:
    """The batch's labels (sampled positives and their mined negatives), this rank's shares of
    inputs and labels, and the loss's masks."""
    chosen = negatives[rows].ravel()
    label_ids = np.unique(np.concatenate([positives, chosen[chosen >= 0]]))
    batch_labels = Y[rows]
    return BatchPlan(
        input_rows=shard(rows, ctx), label_rows=shard(pad_to_multiple(label_ids, ctx.world_size), ctx),
        n_labels=len(label_ids),
        positive_col=torch.from_numpy(np.searchsorted(label_ids, positives)).to(ctx.device),
        is_positive=batch_label_masks(batch_labels, label_ids).to(ctx.device),
        share=shared_label_mask(batch_labels).to(ctx.device) if settings.instance_negatives else None,
        tau=settings.tau)


def _encode_rows(model, cache: TokenCache, split: str, rows: np.ndarray, ctx: DistContext,
                 precision: str) -> torch.Tensor:
    with autocast(ctx.device, precision):
        return encode(model, *batch_tensors(cache.ids(split), cache.lengths(split), rows, ctx.device))


def _plain_backward(model, cache: TokenCache, plan: BatchPlan, ctx: DistContext, precision: str) -> torch.Tensor:
    """Encode this rank's share with graph, gather, and back-propagate the loss through it."""
    x = gather_with_grad(_encode_rows(model, cache, "train", plan.input_rows, ctx, precision), ctx)
    z = gather_with_grad(_encode_rows(model, cache, "labels", plan.label_rows, ctx, precision), ctx)
    loss = plan.loss(x, z)
    loss.backward()
    return loss


class _RngSnapshot:
    """The RNG state dropout draws from (CPU, and the GPU's on a GPU), to replay a pass's masks."""

    def __init__(self, device: str):
        self.gpu = torch.device(device) if device.startswith("cuda") else None
        self.cpu_state = torch.get_rng_state()
        self.gpu_state = None if self.gpu is None else torch.cuda.get_rng_state(self.gpu)

    @contextmanager
    def replay(self) -> Iterator[None]:
        """Run the block from this state; afterwards the RNG is where it was before the block."""
        with torch.random.fork_rng(devices=[] if self.gpu is None else [self.gpu], device_type="cuda"):
            torch.set_rng_state(self.cpu_state)
            if self.gpu is not None:
                torch.cuda.set_rng_state(self.gpu_state, self.gpu)
            yield


class _ChunkedEncoding:
    """One split's share of the batch encoded `chunk` texts at a time: first without graph,
    remembering each chunk's RNG state; later again with graph under that state (the same dropout
    masks, so the same embeddings) to back-propagate a gradient given for the embeddings."""

    def __init__(self, encode_rows: Callable[[np.ndarray], torch.Tensor], rows: np.ndarray, chunk: int, device: str):
        self.encode_rows, self.chunk = encode_rows, chunk
        self.chunks = [rows[start:start + chunk] for start in range(0, len(rows), chunk)]
        self.snapshots, pieces = [], []
        with torch.no_grad():
            for part in self.chunks:
                self.snapshots.append(_RngSnapshot(device))  # before this pass draws its dropout masks
                pieces.append(encode_rows(part))
        self.embeddings = torch.cat(pieces)

    def backward(self, gradient: torch.Tensor) -> None:
        for part, snapshot, part_gradient in zip(self.chunks, self.snapshots, gradient.split(self.chunk), strict=True):
            with snapshot.replay():
                embedded = self.encode_rows(part)
            embedded.backward(part_gradient)


def _cached_backward(model, cache: TokenCache, plan: BatchPlan, chunk: int, ctx: DistContext,
                     precision: str) -> torch.Tensor:
    """Gradient caching (Gao et al. 2021): the same gradient as `_plain_backward`, holding the
    graph of only `chunk` texts at a time, so the batch size no longer depends on device memory.

    Encode this rank's share in chunks without graph; gather; compute the loss and its gradient
    with respect to the embeddings (leaf tensors), keeping this rank's slice of it (every rank
    holds the same loss, as in gather_with_grad); re-encode chunk by chunk with graph and
    back-propagate those slices. Costs one more forward pass of the encoder.
    """
    def encoder(split: str) -> Callable[[np.ndarray], torch.Tensor]:
        return lambda rows: _encode_rows(model, cache, split, rows, ctx, precision)

    inputs = _ChunkedEncoding(encoder("train"), plan.input_rows, chunk, ctx.device)
    labels = _ChunkedEncoding(encoder("labels"), plan.label_rows, chunk, ctx.device)
    x = gather_array(inputs.embeddings, ctx).requires_grad_()
    z = gather_array(labels.embeddings, ctx).requires_grad_()
    loss = plan.loss(x, z)
    loss.backward()
    inputs.backward(shard(x.grad, ctx))
    labels.backward(shard(z.grad, ctx))
    return loss


def _all_reduce_gradients(model, ctx: DistContext) -> None:
    """Sum gradients across ranks in one flat buffer: each rank back-propagated the (identical)
    loss through its own encodings only, so the sum is the one-process gradient."""
    if not ctx.active:
        return
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def training_step(model, cache: TokenCache, Y: sp.csr_matrix, rows: np.ndarray, positives: np.ndarray,
                  negatives: np.ndarray, settings: TrainSettings, ctx: DistContext, precision: str) -> torch.Tensor:
    """The loss of one global batch (the same on every rank), leaving its full gradient in every
    parameter's .grad on every rank; with `grad_cache_chunk` the encoder sees that many texts at once."""
    model.zero_grad(set_to_none=True)
    plan = plan_batch(Y, rows, positives, negatives, settings, ctx)
    if settings.grad_cache_chunk:
        loss = _cached_backward(model, cache, plan, settings.grad_cache_chunk, ctx, precision)
    else:
        loss = _plain_backward(model, cache, plan, ctx, precision)
    _all_reduce_gradients(model, ctx)
    return loss.detach()


def make_optimizer(params: list[torch.nn.Parameter], settings: TrainSettings
                   ) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """AdamW with linear warm-up, then linear decay to zero at max_steps."""
    optimizer = torch.optim.AdamW(params, lr=settings.lr, weight_decay=settings.weight_decay)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer,
                                                        linear_schedule(settings.warmup_steps, settings.max_steps))


def apply_gradients(params: list[torch.nn.Parameter], optimizer: torch.optim.Optimizer,
                    scheduler: torch.optim.lr_scheduler.LRScheduler, grad_clip: float) -> float:
    """Clip the gradients `training_step` left, step optimizer and schedule; return the norm before clipping."""
    norm = torch.nn.utils.clip_grad_norm_(params, grad_clip)
    optimizer.step()
    scheduler.step()
    return float(norm)


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
    optimizer, scheduler = make_optimizer(params, settings)
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
        apply_gradients(params, optimizer, scheduler, settings.grad_clip)
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
