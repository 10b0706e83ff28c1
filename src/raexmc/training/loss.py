"""Decoupled InfoNCE loss for the shared dual encoder, and the batch masks it needs.

A batch holds B inputs (``x``) and the M distinct labels sampled for them (``z``): a sampled positive per input
and any mined hard negatives; each input is scored against every label, and optionally the other inputs.
"Decoupled": an input's other true labels in the batch leave its denominator, so it is not pushed away from
them, and an input sharing a positive with ``i`` is no instance negative of ``i``. The masks are built on the CPU.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

from ..rae.pairs import as_pattern
from ..rae.scoring import PAPER_TAU


def decoupled_infonce(x: Tensor, z: Tensor, positive_col: Tensor, is_positive: Tensor,
                      share_label: Tensor | None = None, tau: float = PAPER_TAU) -> Tensor:
    """Mean decoupled InfoNCE loss of a batch. For input ``i`` with sampled positive column ``p_i``::

            loss_i = logsumexp({s_i,p_i} ∪ {s_i,m : m not a positive of i}
                               ∪ {x_i·x_j/tau : j != i shares no positive with i}) - s_i,p_i

    with ``s_i,m = x_i·z_m / tau``. `x` (B, d) and `z` (M, d) embeddings; `positive_col` (B,) each input's column;
    `is_positive` (B, M) any positive (True at the sampled one); `share_label` (B, B) inputs sharing a positive, or
    None for no instance negatives (i is never its own). Logits are float32 even under autocast: at tau = 0.04 a
    cosine of 1 is 25, and bf16's mantissa would blur near-equal scores. The positive term keeps it finite."""
    if tau <= 0:
        raise ValueError(f"tau must be positive, got {tau}")
    if x.dim() != 2 or z.dim() != 2 or x.shape[1] != z.shape[1]:
        raise ValueError(f"x and z must be (B, d) and (M, d), got {tuple(x.shape)} and {tuple(z.shape)}")
    batch, n_labels = x.shape[0], z.shape[0]
    for name, tensor, shape in (("is_positive", is_positive, (batch, n_labels)), ("positive_col", positive_col,
                                (batch,)), ("share_label", share_label, (batch, batch))):
        if tensor is not None and tuple(tensor.shape) != shape:
            raise ValueError(f"{name} must be {shape}, got {tuple(tensor.shape)}")
    device = x.device
    positive_col = positive_col.to(device=device, dtype=torch.long)
    is_positive = is_positive.to(device=device, dtype=torch.bool)
    rows = torch.arange(batch, device=device)
    if not bool(is_positive[rows, positive_col].all()):
        raise ValueError("is_positive must be True at each input's sampled positive column")

    with torch.autocast(device_type=device.type, enabled=False):
        xf = x.float()
        label_logits = (xf @ z.float().T) / tau  # (B, M)
        keep = ~is_positive  # negatives: every column that is not a positive of i; plus the sampled positive
        keep[rows, positive_col] = True
        scores = label_logits.masked_fill(~keep, float("-inf"))
        if share_label is not None:
            instance_keep = ~share_label.to(device=device, dtype=torch.bool)
            instance_keep[rows, rows] = False
            scores = torch.cat([scores, ((xf @ xf.T) / tau).masked_fill(~instance_keep, float("-inf"))], dim=1)
        positive_logit = label_logits[rows, positive_col]  # (B,)
        return (torch.logsumexp(scores, dim=1) - positive_logit).mean()


def batch_label_masks(batch_labels: sp.spmatrix | sp.sparray, batch_label_ids: np.ndarray) -> Tensor:
    """(B, M) bool: True where column m (label ``batch_label_ids[m]``) is any positive of input i; ``batch_labels``
    the batch's rows of the label matrix."""
    columns = np.asarray(batch_label_ids, dtype=np.int64).reshape(-1)
    if len(np.unique(columns)) != len(columns):
        raise ValueError("batch_label_ids must be distinct")
    return torch.from_numpy(as_pattern(batch_labels)[:, columns].toarray() > 0)


def shared_label_mask(batch_labels: sp.spmatrix | sp.sparray) -> Tensor:
    """(B, B) bool: inputs i and j share a positive label (diagonal True): ``Y_b Y_bᵀ > 0``."""
    pattern = as_pattern(batch_labels)
    shared = (pattern @ pattern.T).toarray() > 0
    np.fill_diagonal(shared, True)
    return torch.from_numpy(np.ascontiguousarray(shared))
