"""A mining round every `hnm_steps`: re-embed the labels and the inputs the round needs, mine (mining.py), validate
(P@1 of RAE, the dual encoder and kNN on held-out training inputs). A round without validation
(`val_max_queries: 0`) embeds at most hnm_steps x the global batch inputs."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch

from ..encoder.device import embed_batch_size
from ..encoder.text_encoder import TextEncoder, length_sorted_batches
from ..encoder.tokens import TokenCache
from ..evaluation.evaluator import Evaluator
from ..evaluation.methods import method_scorers
from ..evaluation.retrievals import Retrievals
from ..memory.keys_values import training_values
from ..memory.torch_index import exact_index
from ..process_group import DistContext
from ..progress import progress_bar
from .distributed import gather_array, pad_to_multiple, shard
from .mining import mine_hard_negatives
from .settings import TrainSettings


def embed_sharded(encoder: TextEncoder, ids: np.ndarray, lengths: np.ndarray, rows: np.ndarray, batch_size: int,
                  ctx: DistContext) -> np.ndarray:
    """Embeddings of `rows` in their order, each rank encoding its share, gathered."""
    count = len(rows)
    padded = pad_to_multiple(np.arange(count), ctx.world_size)
    share = np.asarray(rows)[shard(padded, ctx)]
    local = np.zeros((len(share), encoder.dim), np.float32)
    for batch in progress_bar(length_sorted_batches(np.asarray(lengths)[share], batch_size), desc="re-embed",
                              unit="batch", disable=not ctx.is_main, mininterval=2.0, leave=False):
        local[batch] = encoder.embed(ids, lengths, share[batch])
    gathered = gather_array(torch.from_numpy(local).to(ctx.device), ctx).cpu().numpy()
    out = np.zeros((count, local.shape[1]), np.float32)
    out[padded] = gathered  # shards are contiguous slices of `padded`, gathered in rank order
    return out


def validate(inputs: np.ndarray, labels: np.ndarray, Y: sp.csr_matrix, filters: sp.csr_matrix,
             train_rows: np.ndarray, val_rows: np.ndarray, settings: TrainSettings, device: str,
             propensity_ab: tuple[float, float]) -> dict[str, float]:
    """Validation P@1 of RAE, the dual encoder and kNN (each its own exact search), and the inputs queried."""
    queries, memory_inputs = inputs[val_rows], inputs[train_rows]
    searches = {"joint": np.vstack([memory_inputs, labels]), "labels": labels, "inputs": memory_inputs}
    retrievals = Retrievals(**{name: exact_index(keys, device).search(queries, settings.val_b)
                               for name, keys in searches.items()})
    values = training_values(Y[train_rows], copy=False)
    evaluator = Evaluator(values, Y[val_rows], filters[val_rows], propensity_ab)
    scorers = method_scorers(retrievals, values, settings.val_lambda, settings.tau, settings.val_b)
    return {"val_queries": len(val_rows),
            **{f"val_{name}_P@1": evaluator.summary(evaluator.rank(len(val_rows), scorer))[0]["P@1"]
               for name, scorer in scorers.items()}}


@dataclass
class RoundResult:
    """Every training input's mined negatives (N, m; -1 where none) and the validation P@1s."""

    negatives: np.ndarray
    validation: dict[str, float]


def mining_round(encoder: TextEncoder, cache: TokenCache, Y: sp.csr_matrix, filters: sp.csr_matrix,
                 train_rows: np.ndarray, val_rows: np.ndarray, mine_rows: np.ndarray, settings: TrainSettings,
                 ctx: DistContext, round_no: int, propensity_ab: tuple[float, float]) -> RoundResult:
    """Mine hard negatives for `mine_rows` (sorted; none: validation only) and validate on `val_rows`, re-embedding
    the labels and the inputs those need (every one when validating: its memory)."""
    negatives = np.full((Y.shape[0], settings.num_hard_negatives), -1, np.int64)
    if not len(mine_rows) and not len(val_rows):
        return RoundResult(negatives, {})
    embedded_rows = np.arange(Y.shape[0]) if len(val_rows) else mine_rows
    batch_size = embed_batch_size(settings.embed_batch_size, ctx.device)
    encoder.model.eval()
    labels = embed_sharded(encoder, cache.ids("labels"), cache.lengths("labels"), np.arange(Y.shape[1]),
                           batch_size, ctx)
    inputs = embed_sharded(encoder, cache.ids("train"), cache.lengths("train"), embedded_rows, batch_size, ctx)
    encoder.model.train()
    if len(mine_rows):
        negatives[mine_rows] = mine_hard_negatives(
            inputs[np.searchsorted(embedded_rows, mine_rows)], mine_rows,
            functools.partial(exact_index(labels, ctx.device).search, progress=ctx.is_main), Y, settings.hnm_topk,
            settings.num_hard_negatives, np.random.default_rng([settings.seed, 1000 + round_no]))
    validation = {}
    if len(val_rows):
        validation = validate(inputs, labels, Y, filters, train_rows, val_rows, settings, ctx.device, propensity_ab)
    return RoundResult(negatives, validation)
