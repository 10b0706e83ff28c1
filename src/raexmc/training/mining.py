"""Hard negative mining: labels the current encoder ranks high for an input but that are wrong.

Every `hnm_steps` the labels are re-embedded and the top `hnm_topk` retrieved for the inputs the next round's
steps draw (no others are read before the next round), their positives dropped and m sampled. Input r's
sampling keys are row r of one (N, hnm_topk) stream of the round's generator, so an input gets the negatives it
would get if every input were mined. Vectorised: one sparse lookup, one argsort.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

Search = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]


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


def mine_hard_negatives(embeddings: np.ndarray, input_rows: np.ndarray, search: Search, Y: sp.csr_matrix,
                        topk: int, m: int, rng: np.random.Generator) -> np.ndarray:  # from `search` over the labels
    return sample_negatives(search(embeddings, topk)[0], input_rows, Y, m, rng)
