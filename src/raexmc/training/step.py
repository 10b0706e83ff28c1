"""One optimisation step: the global batch (the same on every rank, seeded by step: a resume needs no sampler
state), this rank's share, its full gradient on every rank (plain or gradient caching), then AdamW."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from ..encoder.text_encoder import TextEncoder
from ..encoder.tokens import TokenCache
from ..process_group import DistContext
from .distributed import all_reduce_gradients, gather_array, gather_with_grad, pad_to_multiple, shard
from .loss import batch_label_masks, decoupled_infonce, shared_label_mask
from .settings import TrainSettings


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

    def rows_drawn(self, first: int, last: int, size: int) -> np.ndarray:
        """The distinct rows steps first..last-1 draw, sorted."""
        drawn = np.zeros(self.Y.shape[0], bool)
        for step in range(first, last):
            drawn[self.batch(step, size)[0]] = True
        return np.flatnonzero(drawn)


@dataclass
class BatchPlan:
    """One global batch as this rank sees it; labels are padded to equal shares, cut off before the loss."""
    input_rows: np.ndarray      # this rank's share of the batch's inputs
    label_rows: np.ndarray      # this rank's share of the batch's distinct labels, padded
    n_labels: int
    positive_col: torch.Tensor
    is_positive: torch.Tensor
    share: torch.Tensor | None
    tau: float

    def loss(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:  # of the gathered (padded) embeddings
        return decoupled_infonce(x, z[: self.n_labels], self.positive_col, self.is_positive, self.share, self.tau)


def plan_batch(Y: sp.csr_matrix, rows: np.ndarray, positives: np.ndarray, negatives: np.ndarray,
               settings: TrainSettings, ctx: DistContext) -> BatchPlan:
    """The batch's labels (positives, mined negatives), this rank's shares and the loss's masks."""
    chosen = negatives[rows].ravel()
    label_ids = np.unique(np.concatenate([positives, chosen[chosen >= 0]]))
    batch_labels = Y[rows]
    return BatchPlan(input_rows=shard(rows, ctx), label_rows=shard(pad_to_multiple(label_ids, ctx.world_size), ctx),
                     n_labels=len(label_ids), tau=settings.tau,
                     positive_col=torch.from_numpy(np.searchsorted(label_ids, positives)).to(ctx.device),
                     is_positive=batch_label_masks(batch_labels, label_ids).to(ctx.device),
                     share=shared_label_mask(batch_labels).to(ctx.device) if settings.instance_negatives else None)


def split_encoder(encoder: TextEncoder, cache: TokenCache, split: str) -> Callable[[np.ndarray], torch.Tensor]:
    return lambda rows: encoder.encode(cache.ids(split), cache.lengths(split), rows)


def plain_backward(encoder: TextEncoder, cache: TokenCache, plan: BatchPlan, ctx: DistContext) -> torch.Tensor:
    """Encode this rank's share with graph, gather, and back-propagate the loss through it."""
    loss = plan.loss(gather_with_grad(split_encoder(encoder, cache, "train")(plan.input_rows), ctx),
                     gather_with_grad(split_encoder(encoder, cache, "labels")(plan.label_rows), ctx))
    loss.backward()
    return loss


class ChunkedEncoding:
    """One split's share of the batch encoded `chunk` texts at a time, first without graph (keeping the RNG state
    each chunk's dropout draws from: CPU, and the GPU's on a GPU), later again with graph under that state (the
    same dropout, so the same embeddings)."""

    def __init__(self, encode_rows: Callable[[np.ndarray], torch.Tensor], rows: np.ndarray, chunk: int, device: str):
        self.encode_rows, self.chunk = encode_rows, chunk
        self.gpu = torch.device(device) if device.startswith("cuda") else None
        self.chunks = [rows[start:start + chunk] for start in range(0, len(rows), chunk)]
        self.states, pieces = [], []
        with torch.no_grad():
            for part in self.chunks:  # the state before this pass draws its dropout masks
                self.states.append((torch.get_rng_state(),
                                    None if self.gpu is None else torch.cuda.get_rng_state(self.gpu)))
                pieces.append(encode_rows(part))
        self.embeddings = torch.cat(pieces)

    def backward(self, gradient: torch.Tensor) -> None:
        for part, (cpu, gpu), part_gradient in zip(self.chunks, self.states, gradient.split(self.chunk), strict=True):
            with torch.random.fork_rng(devices=[] if self.gpu is None else [self.gpu], device_type="cuda"):
                torch.set_rng_state(cpu)  # replayed; afterwards the RNG is where it was before
                if self.gpu is not None:
                    torch.cuda.set_rng_state(gpu, self.gpu)
                embedded = self.encode_rows(part)
            embedded.backward(part_gradient)


def cached_backward(encoder: TextEncoder, cache: TokenCache, plan: BatchPlan, chunk: int,
                    ctx: DistContext) -> torch.Tensor:
    """Gradient caching (Gao et al. 2021): `plain_backward`'s gradient with the graph of `chunk` texts at a time:
    encode without graph, gather, the loss's gradient at the embeddings, then re-encode chunk by chunk with graph."""
    inputs = ChunkedEncoding(split_encoder(encoder, cache, "train"), plan.input_rows, chunk, ctx.device)
    labels = ChunkedEncoding(split_encoder(encoder, cache, "labels"), plan.label_rows, chunk, ctx.device)
    x = gather_array(inputs.embeddings, ctx).requires_grad_()
    z = gather_array(labels.embeddings, ctx).requires_grad_()
    loss = plan.loss(x, z)
    loss.backward()
    inputs.backward(shard(x.grad, ctx))
    labels.backward(shard(z.grad, ctx))
    return loss


def training_step(encoder: TextEncoder, cache: TokenCache, Y: sp.csr_matrix, rows: np.ndarray, positives: np.ndarray,
                  negatives: np.ndarray, settings: TrainSettings, ctx: DistContext) -> torch.Tensor:
    """The loss of one global batch (the same on every rank), its full gradient left in every .grad."""
    encoder.model.zero_grad(set_to_none=True)
    plan = plan_batch(Y, rows, positives, negatives, settings, ctx)
    loss = (cached_backward(encoder, cache, plan, settings.grad_cache_chunk, ctx) if settings.grad_cache_chunk
            else plain_backward(encoder, cache, plan, ctx))
    all_reduce_gradients(encoder.model, ctx)
    return loss.detach()


def linear_schedule(warmup: int, total: int) -> Callable[[int], float]:
    return lambda step: ((step + 1) / max(warmup, 1) if step < warmup
                         else max(0.0, (total - step) / max(total - warmup, 1)))


def make_optimizer(params: list[torch.nn.Parameter], settings: TrainSettings
                   ) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """AdamW with linear warm-up, then linear decay to zero at max_steps."""
    optimizer = torch.optim.AdamW(params, lr=settings.lr, weight_decay=settings.weight_decay)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, linear_schedule(settings.warmup_steps,
                                                                                   settings.max_steps))


def apply_gradients(params: list[torch.nn.Parameter], optimizer: torch.optim.Optimizer,
                    scheduler: torch.optim.lr_scheduler.LRScheduler, grad_clip: float) -> float:
    """Clip the gradients `training_step` left, step optimizer and schedule; return the norm before clipping."""
    norm = torch.nn.utils.clip_grad_norm_(params, grad_clip)
    optimizer.step()
    scheduler.step()
    return float(norm)
