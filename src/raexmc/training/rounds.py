"""A mining round every `hnm_steps`: re-embed the labels and the inputs the round needs, mine hard negatives
(labels the current encoder ranks high for an input but that are wrong), validate (P@1 of RAE, the dual encoder
and kNN on held-out training inputs). A round without validation (`val_max_queries: 0`) embeds at most hnm_steps x
the global batch inputs: those the next round's steps draw. Of their top `hnm_topk` labels the positives are
dropped and m sampled; input r's sampling keys are row r of one (N, hnm_topk) stream of the round's generator, so
an input gets the negatives it would get if every input were mined."""

from __future__ import annotations

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
from .settings import TrainSettings


def positive_mask(candidates: np.ndarray, Y: sp.csr_matrix) -> np.ndarray:
    """(n, k) bool: True where candidates[i, j] is a positive label of the input in row i of Y (-1 is never)."""
    n, k = candidates.shape
    valid = candidates >= 0
    rows = np.broadcast_to(np.arange(n)[:, None], (n, k))[valid]
    mask = np.zeros((n, k), bool)
    mask[valid] = np.asarray(Y[rows, candidates[valid]]).ravel() != 0
    return mask


def sampling_keys(rng: np.random.Generator, n_inputs: int, input_rows: np.ndarray, k: int,
                  block: int = 65536) -> np.ndarray:
    """(len(input_rows), k) uniform keys, row i that of input_rows[i] in one (n_inputs, k) stream, by blocks."""
    order = np.argsort(input_rows, kind="stable")
    ascending = np.asarray(input_rows)[order]
    if len(ascending) and not 0 <= ascending[0] <= ascending[-1] < n_inputs:
        raise ValueError(f"input rows must lie in [0, {n_inputs})")
    keys = np.empty((len(order), k))
    end = ascending[-1] + 1 if len(ascending) else 0
    for first in range(0, end, block):
        drawn = rng.random((min(block, n_inputs - first), k))
        lo, hi = np.searchsorted(ascending, [first, first + block])
        keys[order[lo:hi]] = drawn[ascending[lo:hi] - first]
    return keys


def sample_negatives(candidates: np.ndarray, input_rows: np.ndarray, Y: sp.csr_matrix, m: int,
                     rng: np.random.Generator) -> np.ndarray:
    """m labels per row drawn uniformly from its non-positive candidates (of Y's row input_rows[i]); -1 if few."""
    usable = (candidates >= 0) & ~positive_mask(candidates, Y[input_rows])
    keys = np.where(usable, sampling_keys(rng, Y.shape[0], input_rows, candidates.shape[1]), np.inf)
    order = np.argsort(keys, axis=1, kind="stable")[:, :m]
    chosen = np.take_along_axis(candidates, order, axis=1)
    return np.where(np.take_along_axis(usable, order, axis=1), chosen, -1)


def embed_sharded(encoder: TextEncoder, ids: np.ndarray, lengths: np.ndarray, rows: np.ndarray, batch_size: int,
                  ctx: DistContext) -> np.ndarray:
    """Embeddings of `rows` in their order, each rank encoding its share, gathered."""
    padded = pad_to_multiple(np.arange(len(rows)), ctx.world_size)
    share = np.asarray(rows)[shard(padded, ctx)]
    local = np.zeros((len(share), encoder.dim), np.float32)
    for batch in progress_bar(length_sorted_batches(np.asarray(lengths)[share], batch_size), desc="re-embed",
                              unit="batch", disable=not ctx.is_main, mininterval=2.0, leave=False):
        local[batch] = encoder.embed(ids, lengths, share[batch])
    out = np.zeros((len(rows), local.shape[1]), np.float32)
    # shards are contiguous slices of `padded`, gathered in rank order
    out[padded] = gather_array(torch.from_numpy(local).to(ctx.device), ctx).cpu().numpy()
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


def mining_round(encoder: TextEncoder, cache: TokenCache, Y: sp.csr_matrix, filters: sp.csr_matrix,
                 train_rows: np.ndarray, val_rows: np.ndarray, mine_rows: np.ndarray, settings: TrainSettings,
                 ctx: DistContext, round_no: int, propensity_ab: tuple[float, float]
                 ) -> tuple[np.ndarray, dict[str, float]]:
    """Every training input's negatives (N, m; -1 where none) mined for `mine_rows` (sorted; none: validation only)
    and the validation P@1s on `val_rows`, re-embedding the labels and the inputs those need (every one when
    validating: its memory)."""
    negatives = np.full((Y.shape[0], settings.num_hard_negatives), -1, np.int64)
    if not len(mine_rows) and not len(val_rows):
        return negatives, {}
    embedded_rows = np.arange(Y.shape[0]) if len(val_rows) else mine_rows
    batch_size = embed_batch_size(settings.embed_batch_size, ctx.device)
    encoder.model.eval()
    labels = embed_sharded(encoder, cache.ids("labels"), cache.lengths("labels"), np.arange(Y.shape[1]),
                           batch_size, ctx)
    inputs = embed_sharded(encoder, cache.ids("train"), cache.lengths("train"), embedded_rows, batch_size, ctx)
    encoder.model.train()
    if len(mine_rows):
        ranked = exact_index(labels, ctx.device).search(  # the labels the encoder ranks highest
            inputs[np.searchsorted(embedded_rows, mine_rows)], settings.hnm_topk, progress=ctx.is_main)[0]
        negatives[mine_rows] = sample_negatives(ranked, mine_rows, Y, settings.num_hard_negatives,
                                                np.random.default_rng([settings.seed, 1000 + round_no]))
    return negatives, (validate(inputs, labels, Y, filters, train_rows, val_rows, settings, ctx.device, propensity_ab)
                       if len(val_rows) else {})
