"""The torch.distributed group of a stage torchrun launched (or one plain process): NCCL on GPUs, gloo on CPU."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistContext:
    rank: int
    world_size: int
    device: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1


def init_distributed(device: str = "auto") -> DistContext:
    """Join the process group torchrun describes in the environment; a single process otherwise."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    use_cuda = torch.cuda.is_available() if device == "auto" else device.startswith("cuda")
    if use_cuda:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        resolved = f"cuda:{local_rank}"
    else:
        resolved = "cpu"
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    return DistContext(rank, world_size, resolved)


def shutdown(ctx: DistContext) -> None:
    if ctx.active and dist.is_initialized():
        dist.destroy_process_group()


@contextmanager
def process_group(device: str = "auto", as_given: bool = False) -> Iterator[DistContext]:
    """This process in torchrun's group until the `with` ends; with `as_given`, one process runs on `device` as is."""
    ctx = DistContext(0, 1, device) if as_given and "LOCAL_RANK" not in os.environ else init_distributed(device)
    yield ctx
    shutdown(ctx)
