"""The gradient of one batch's loss on this rank: plain, or with gradient caching (the encoder holds the
graph of `grad_cache_chunk` texts at a time); each rank back-propagates through its own encodings only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import torch

from ..encoder.text_encoder import TextEncoder
from ..encoder.tokens import TokenCache
from ..process_group import DistContext
from .batches import BatchPlan
from .distributed import gather_array, gather_with_grad, shard


def split_encoder(encoder: TextEncoder, cache: TokenCache, split: str) -> Callable[[np.ndarray], torch.Tensor]:
    """Rows of a token-cache split -> their embeddings, with graph."""
    return lambda rows: encoder.encode(cache.ids(split), cache.lengths(split), rows)


def plain_backward(encoder: TextEncoder, cache: TokenCache, plan: BatchPlan, ctx: DistContext) -> torch.Tensor:
    """Encode this rank's share with graph, gather, and back-propagate the loss through it."""
    x = gather_with_grad(split_encoder(encoder, cache, "train")(plan.input_rows), ctx)
    z = gather_with_grad(split_encoder(encoder, cache, "labels")(plan.label_rows), ctx)
    loss = plan.loss(x, z)
    loss.backward()
    return loss


class RngSnapshot:
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


class ChunkedEncoding:
    """One split's share of the batch encoded `chunk` texts at a time, first without graph (keeping each chunk's
    RNG state), later again with graph under that state (the same dropout, so the same embeddings)."""

    def __init__(self, encode_rows: Callable[[np.ndarray], torch.Tensor], rows: np.ndarray, chunk: int, device: str):
        self.encode_rows, self.chunk = encode_rows, chunk
        self.chunks = [rows[start:start + chunk] for start in range(0, len(rows), chunk)]
        self.snapshots, pieces = [], []
        with torch.no_grad():
            for part in self.chunks:
                self.snapshots.append(RngSnapshot(device))  # before this pass draws its dropout masks
                pieces.append(encode_rows(part))
        self.embeddings = torch.cat(pieces)

    def backward(self, gradient: torch.Tensor) -> None:
        for part, snapshot, part_gradient in zip(self.chunks, self.snapshots, gradient.split(self.chunk), strict=True):
            with snapshot.replay():
                embedded = self.encode_rows(part)
            embedded.backward(part_gradient)


def cached_backward(encoder: TextEncoder, cache: TokenCache, plan: BatchPlan, chunk: int,
                    ctx: DistContext) -> torch.Tensor:
    """Gradient caching (Gao et al. 2021): `plain_backward`'s gradient with the graph of `chunk` texts at a
    time. Encode without graph, gather, take the loss's gradient with respect to the embeddings (this rank's
    slice), then re-encode chunk by chunk with graph and back-propagate the slices: one more forward pass."""
    inputs = ChunkedEncoding(split_encoder(encoder, cache, "train"), plan.input_rows, chunk, ctx.device)
    labels = ChunkedEncoding(split_encoder(encoder, cache, "labels"), plan.label_rows, chunk, ctx.device)
    x = gather_array(inputs.embeddings, ctx).requires_grad_()
    z = gather_array(labels.embeddings, ctx).requires_grad_()
    loss = plan.loss(x, z)
    loss.backward()
    inputs.backward(shard(x.grad, ctx))
    labels.backward(shard(z.grad, ctx))
    return loss
