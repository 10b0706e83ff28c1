"""What one training step sees: the global batch (the same on every rank, the sampler seeded by step, so a
resume needs no sampler state) and this rank's share of its inputs and labels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from ..process_group import DistContext
from .distributed import pad_to_multiple, shard
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
        """The distinct rows steps first..last-1 draw, sorted (through a mask: the draws outnumber the rows)."""
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

    def loss(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """Decoupled InfoNCE of the gathered input and (padded) label embeddings."""
        return decoupled_infonce(x, z[: self.n_labels], self.positive_col, self.is_positive, self.share, self.tau)


def plan_batch(Y: sp.csr_matrix, rows: np.ndarray, positives: np.ndarray, negatives: np.ndarray,
               settings: TrainSettings, ctx: DistContext) -> BatchPlan:
    """The batch's labels (positives, mined negatives), this rank's shares and the loss's masks."""
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
