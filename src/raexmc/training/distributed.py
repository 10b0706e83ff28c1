"""torch.distributed for training launched by torchrun (or one plain process): the GPU count check, gathers,
gradient sums. Joining and leaving the process group is raexmc.process_group (the embed stage uses it too)."""

from __future__ import annotations

import os

import numpy as np
import torch
import torch.distributed as dist

from ..errors import ConfigError
from ..process_group import DistContext


def check_gpu_count(nproc: int, device: str, path: str | os.PathLike, key: str) -> None:
    """ConfigError naming `key` when `nproc` processes would each take a GPU and fewer are visible (torchrun
    would start them, and those without one fail one by one)."""
    uses_cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    visible = torch.cuda.device_count()
    if uses_cuda and nproc > visible:
        seen = {0: "no GPU is", 1: "1 GPU is"}.get(visible, f"{visible} GPUs are")
        fix = (f"set it to at most {visible} (the global batch is it x train.batch_size)" if visible
               else "run it where the GPUs are, or on the CPU (train.device: cpu)")
        raise ConfigError(f"{nproc} processes, one per GPU, but {seen} visible: {fix}", path, key)


class _GatherKeepingLocalGradient(torch.autograd.Function):
    """All-gather whose backward hands each rank only its own slice of the gradient: every rank computes the same
    loss, so that slice is dL/d(this rank's part). (torch.distributed.nn's all_gather reduce-scatters, summing W
    identical gradients: W times too large.)"""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
        ctx.start, ctx.rows = rank * tensor.shape[0], tensor.shape[0]
        return _all_gather(tensor, world_size)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad[ctx.start:ctx.start + ctx.rows], None, None


def gather_with_grad(tensor: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    """Every rank's equal `tensor` concatenated, gradients to the local part (a loss all ranks compute alike)."""
    return _GatherKeepingLocalGradient.apply(tensor, ctx.rank, ctx.world_size) if ctx.active else tensor


def _all_gather(tensor: torch.Tensor, world_size: int) -> torch.Tensor:
    parts = [torch.empty_like(tensor) for _ in range(world_size)]
    dist.all_gather(parts, tensor.contiguous())
    return torch.cat(parts, dim=0)


def gather_array(tensor: torch.Tensor, ctx: DistContext) -> torch.Tensor:  # every rank's equal `tensor`, no grad
    return _all_gather(tensor, ctx.world_size) if ctx.active else tensor


def shard(rows, ctx: DistContext):  # this rank's equal share of `rows` (length divisible by world_size)
    size = len(rows) // ctx.world_size
    return rows[ctx.rank * size:(ctx.rank + 1) * size]


def pad_to_multiple(rows, multiple: int):
    """`rows` padded by repeating its first element up to a multiple of `multiple` (for equal shards)."""
    missing = (-len(rows)) % multiple
    return np.concatenate([rows, np.repeat(rows[:1], missing)]) if missing else rows


def all_reduce_gradients(model, ctx: DistContext) -> None:
    """Sum the ranks' gradients in one flat buffer: each back-propagated the same loss through its own share."""
    if not ctx.active:
        return
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    for g, part in zip(grads, flat.split([g.numel() for g in grads])):
        g.copy_(part.view_as(g))
