"""One optimisation step: the full gradient of a global batch on every rank, then AdamW on a linear schedule."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.sparse as sp
import torch

from ..encoder.text_encoder import TextEncoder
from ..encoder.tokens import TokenCache
from ..process_group import DistContext
from .backward import cached_backward, plain_backward
from .batches import plan_batch
from .distributed import all_reduce_gradients
from .settings import TrainSettings


def training_step(encoder: TextEncoder, cache: TokenCache, Y: sp.csr_matrix, rows: np.ndarray, positives: np.ndarray,
                  negatives: np.ndarray, settings: TrainSettings, ctx: DistContext) -> torch.Tensor:
    """The loss of one global batch (the same on every rank), its full gradient left in every .grad."""
    encoder.model.zero_grad(set_to_none=True)
    plan = plan_batch(Y, rows, positives, negatives, settings, ctx)
    if settings.grad_cache_chunk:
        loss = cached_backward(encoder, cache, plan, settings.grad_cache_chunk, ctx)
    else:
        loss = plain_backward(encoder, cache, plan, ctx)
    all_reduce_gradients(encoder.model, ctx)
    return loss.detach()


def linear_schedule(warmup: int, total: int) -> Callable[[int], float]:
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / max(warmup, 1)
        return max(0.0, (total - step) / max(total - warmup, 1))
    return factor


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
