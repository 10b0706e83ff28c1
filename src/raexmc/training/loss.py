"""Decoupled InfoNCE loss for the shared dual encoder, and the batch masks it needs.

A batch holds B inputs (``x``) and the M distinct labels sampled for them (``z``): a sampled positive per input
and any mined hard negatives; each input is scored against every label, and optionally the other inputs.
"Decoupled": an input's other true labels in the batch leave its denominator, so it is not pushed away from
them, and an input sharing a positive with ``i`` is no instance negative of ``i``. The masks are built on the CPU.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

from ..rae.scoring import PAPER_TAU

LabelRows = Sequence[Sequence[int] | np.ndarray] | sp.spmatrix | sp.sparray


def decoupled_infonce(
    x: Tensor,
    z: Tensor,
    positive_col: Tensor,
    is_positive: Tensor,
    share_label: Tensor | None = None,
    tau: float = PAPER_TAU,
) -> Tensor:
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
    if tuple(is_positive.shape) != (batch, n_labels):
        raise ValueError(f"is_positive must be ({batch}, {n_labels}), got {tuple(is_positive.shape)}")
    if tuple(positive_col.shape) != (batch,):
        raise ValueError(f"positive_col must be ({batch},), got {tuple(positive_col.shape)}")
    if share_label is not None and tuple(share_label.shape) != (batch, batch):
        raise ValueError(f"share_label must be ({batch}, {batch}), got {tuple(share_label.shape)}")

    device = x.device
    positive_col = positive_col.to(device=device, dtype=torch.long)
    is_positive = is_positive.to(device=device, dtype=torch.bool)
    rows = torch.arange(batch, device=device)
    if not bool(is_positive[rows, positive_col].all()):
        raise ValueError("is_positive must be True at each input's sampled positive column")

    with torch.autocast(device_type=device.type, enabled=False):
        xf = x.float()
        label_logits = (xf @ z.float().T) / tau  # (B, M)
        positive_logit = label_logits[rows, positive_col]  # (B,)

        # Negatives: every column that is not a positive of i; plus the sampled positive itself.
        keep = ~is_positive
        keep[rows, positive_col] = True
        scores = label_logits.masked_fill(~keep, float("-inf"))

        if share_label is not None:
            share_label = share_label.to(device=device, dtype=torch.bool)
            instance_logits = (xf @ xf.T) / tau  # (B, B)
            instance_keep = ~share_label
            instance_keep[rows, rows] = False
            scores = torch.cat([scores, instance_logits.masked_fill(~instance_keep, float("-inf"))], dim=1)

        return (torch.logsumexp(scores, dim=1) - positive_logit).mean()


def _rows_to_csr(batch_labels: LabelRows) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, label ids) of the batch rows, from a CSR slice or a list of id arrays."""
    if sp.issparse(batch_labels):
        csr = sp.csr_array(batch_labels)
        csr.eliminate_zeros()
        return csr.indptr.astype(np.int64), csr.indices.astype(np.int64)
    arrays = [np.asarray(row, dtype=np.int64).reshape(-1) for row in batch_labels]
    lengths = np.fromiter((a.size for a in arrays), dtype=np.int64, count=len(arrays))
    indptr = np.zeros(len(arrays) + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    ids = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
    return indptr, ids


def batch_label_masks(batch_labels: LabelRows, batch_label_ids: Sequence[int] | np.ndarray) -> Tensor:
    """(B, M) bool: True where column m (label ``batch_label_ids[m]``) is any positive of input i;
    ``batch_labels`` the batch's positive label ids (arrays, or CSR rows)."""
    indptr, ids = _rows_to_csr(batch_labels)
    columns = np.asarray(batch_label_ids, dtype=np.int64).reshape(-1)
    batch, n_labels = indptr.size - 1, columns.size
    order = np.argsort(columns, kind="stable")
    sorted_ids = columns[order]
    if n_labels > 1 and bool((sorted_ids[1:] == sorted_ids[:-1]).any()):
        raise ValueError("batch_label_ids must be distinct")

    mask = np.zeros((batch, n_labels), dtype=bool)
    if n_labels and ids.size:
        row_of = np.repeat(np.arange(batch), np.diff(indptr))
        where = np.minimum(np.searchsorted(sorted_ids, ids), n_labels - 1)
        found = sorted_ids[where] == ids
        mask[row_of[found], order[where[found]]] = True
    return torch.from_numpy(mask)


def shared_label_mask(batch_labels: LabelRows) -> Tensor:
    """(B, B) bool: inputs i and j share a positive label (diagonal True): ``Y_b Y_bᵀ > 0`` on the labels present."""
    indptr, ids = _rows_to_csr(batch_labels)
    batch = indptr.size - 1
    local, compact = np.unique(ids, return_inverse=True)
    y = sp.csr_array(
        (np.ones(ids.size, dtype=np.int32), compact.reshape(-1), indptr),
        shape=(batch, local.size),
    )
    y.sum_duplicates()
    y.data[:] = 1
    shared = (y @ y.T).toarray() > 0
    np.fill_diagonal(shared, True)
    return torch.from_numpy(np.ascontiguousarray(shared))
