"""Decoupled InfoNCE loss for training the shared dual encoder, and the batch masks it needs.

A training batch holds B inputs (embeddings ``x``) and the M distinct labels sampled for them
(embeddings ``z``): one sampled positive per input plus any hard negatives the caller mined. Each
input is scored against every label of the batch, and optionally against the other inputs.

Multi-label inputs are why the loss is "decoupled": an input's other true labels may sit in the
batch (as another input's positive or as a mined negative that turned out to be a positive), and a
plain softmax would push the input away from them. Those columns are therefore removed from the
denominator; the sampled positive appears only as the numerator term. For the same reason, another
input that shares a positive label with input ``i`` is not used as an instance negative for ``i``.

The mask builders run on the CPU from the positive label ids of the batch rows; move their results
to the training device together with the embeddings.
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
    """Mean decoupled InfoNCE loss of a batch.

    For input ``i`` with sampled positive column ``p_i``::

        loss_i = logsumexp({s_i,p_i} ∪ {s_i,m : m not a positive of i}
                           ∪ {x_i·x_j/tau : j != i shares no positive with i}) - s_i,p_i

    with ``s_i,m = x_i·z_m / tau``.

    Args:
        x: (B, d) input embeddings (normally L2-normalised).
        z: (M, d) embeddings of the batch's distinct labels, in column order.
        positive_col: (B,) long, the column in ``z`` of each input's sampled positive.
        is_positive: (B, M) bool, True where column m is any positive of input i; must be True at
            ``(i, positive_col[i])``. Those columns are left out of i's denominator so that an input
            is not pushed away from its other true labels.
        share_label: (B, B) bool, True where inputs i and j share a positive label, or None to
            switch instance negatives off. Inputs that share a label with i are not negatives of i;
            i itself is never one, whatever the diagonal holds.
        tau: softmax temperature (> 0).

    The logits are computed in float32 even under bf16/fp16 autocast: at tau = 0.04 a cosine of 1
    is a logit of 25, and bf16's 8-bit mantissa would blur differences between near-equal scores.
    Masked entries are set to -inf before a logsumexp, which stays finite because the positive
    term is always present.
    """
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
    """(B, M) bool: True where column m (label ``batch_label_ids[m]``) is any positive of input i.

    ``batch_labels`` is the positive label ids of each batch input: a list of arrays, or the
    batch's rows of the CSR label matrix (column index = label id). ``batch_label_ids`` holds the
    M distinct label ids of the batch in the column order of ``z``. Positives of i that are not in
    the batch are simply absent; this mask is what keeps them out of i's denominator when present.
    """
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
    """(B, B) bool: True where inputs i and j share at least one positive label; diagonal True.

    Computed as ``Y_b Y_bᵀ > 0`` on the batch's label rows, with labels renumbered to the ones
    present so the product stays small. Inputs sharing a label are not instance negatives of each
    other: they are both near that label, and pushing them apart would contradict the positives.
    """
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
