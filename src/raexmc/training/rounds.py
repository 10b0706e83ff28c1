"""A mining round every `hnm_steps`: re-embed inputs and labels with the current encoder, mine, validate."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch
from tqdm import tqdm

from ..encoder.embedding import embed_rows, length_sorted_batches
from ..encoder.tokens import TokenCache
from ..memory.exact import top_k_search
from .distributed import DistContext, gather_array, pad_to_multiple, shard
from .mining import mine_hard_negatives
from .settings import TrainSettings
from .validation import validate


def embed_all(model, ids: np.ndarray, lengths: np.ndarray, batch_size: int, ctx: DistContext,
              precision: str) -> np.ndarray:
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


@dataclass
class RoundResult:
    """The mined negatives of every training input (N, m; -1 where none), and the validation P@1s."""

    negatives: np.ndarray
    validation: dict[str, float]


def mining_round(model, cache: TokenCache, Y: sp.csr_matrix, filters: sp.csr_matrix, train_rows: np.ndarray,
                 val_rows: np.ndarray, settings: TrainSettings, ctx: DistContext, precision: str, round_no: int,
                 propensity_ab: tuple[float, float], mine_negatives: bool = True) -> RoundResult:
    """Re-embed inputs and labels with the current encoder; mine hard negatives (unless
    `mine_negatives` is false: the round after the last step only validates); validate P@1."""
    model.eval()
    inputs = embed_all(model, cache.ids("train"), cache.lengths("train"), settings.embed_batch_size, ctx, precision)
    labels = embed_all(model, cache.ids("labels"), cache.lengths("labels"), settings.embed_batch_size, ctx, precision)
    model.train()
    negatives = np.full((Y.shape[0], settings.num_hard_negatives), -1, np.int64)
    if settings.hard_negatives and mine_negatives:
        negatives = mine_hard_negatives(inputs, top_k_search(labels, ctx.device, progress=ctx.is_main), Y, settings.hnm_topk,
                                        settings.num_hard_negatives,
                                        np.random.default_rng([settings.seed, 1000 + round_no]))
    validation = {}
    if len(val_rows):
        validation = validate(inputs, labels, Y, filters, train_rows, val_rows, settings, ctx.device, propensity_ab)
    return RoundResult(negatives, validation)
