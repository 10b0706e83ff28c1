"""Hard negative mining: labels the current encoder ranks high for an input but that are wrong.

Every `hnm_steps` the trainer re-embeds the labels, retrieves the top `hnm_topk` labels of every
training input, drops the input's positives and samples m of the rest per input. All of it is
vectorised over inputs: positives are found with one sparse lookup, sampling with one argsort of
random keys.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

Search = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]


def positive_mask(candidates: np.ndarray, Y: sp.csr_matrix) -> np.ndarray:
    """(N, k) bool: True where candidates[i, j] is a positive label of input i (-1 is never)."""
    n, k = candidates.shape
    valid = candidates >= 0
    rows = np.broadcast_to(np.arange(n)[:, None], (n, k))[valid]
    mask = np.zeros((n, k), bool)
    mask[valid] = np.asarray(Y[rows, candidates[valid]]).ravel() != 0
    return mask


def sample_negatives(candidates: np.ndarray, Y: sp.csr_matrix, m: int, rng: np.random.Generator) -> np.ndarray:
    """m labels per input drawn uniformly from its non-positive candidates; -1 where too few."""
    usable = (candidates >= 0) & ~positive_mask(candidates, Y)
    keys = np.where(usable, rng.random(candidates.shape), np.inf)
    order = np.argsort(keys, axis=1, kind="stable")[:, :m]
    chosen = np.take_along_axis(candidates, order, axis=1)
    return np.where(np.take_along_axis(usable, order, axis=1), chosen, -1)


def mine_hard_negatives(inputs: np.ndarray, search: Search, Y: sp.csr_matrix, topk: int, m: int,
                        rng: np.random.Generator) -> np.ndarray:
    """(N, m) hard negative label ids for the training inputs, from `search` over label embeddings."""
    candidates, _ = search(inputs, topk)
    return sample_negatives(candidates, Y, m, rng)
