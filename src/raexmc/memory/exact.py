"""Exact nearest-key search by inner product: the ground truth, the backend for small data, and training's search."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..checks import positive_int
from ..errors import ConfigError
from .search import as_matrix, empty_result

# Elements (not bytes) of scratch space the exact top-k selection may use beside the similarity block.
SELECT_BUDGET = 1 << 20
CHUNK_ROWS = 4096  # queries multiplied by the key matrix at once


class ExactIndex:
    """Exact inner-product top-k: a matrix product per chunk of `chunk_rows` queries.

    The keys are referenced, not copied, when they already are a C-contiguous float32 matrix. At
    most one similarity block of chunk_rows x n_keys float32 values exists at a time; the top-k
    selection works through that block a few rows at a time with about SELECT_BUDGET elements of
    scratch space. Among keys with equal similarity the smaller id wins, so results are
    deterministic even with duplicate keys.
    """

    backend = "exact"

    def __init__(self, keys: np.ndarray, chunk_rows: int = CHUNK_ROWS):
        if chunk_rows < 1:
            raise ConfigError(f"chunk_rows must be >= 1, got {chunk_rows}")
        self.keys = as_matrix(keys, "keys")
        self.chunk_rows = int(chunk_rows)

    @property
    def count(self) -> int:
        return self.keys.shape[0]

    @property
    def dim(self) -> int:
        return self.keys.shape[1]

    def __repr__(self) -> str:
        return f"ExactIndex(count={self.count}, dim={self.dim}, chunk_rows={self.chunk_rows})"

    def _scores(self, queries: np.ndarray) -> np.ndarray:
        """The similarity block of a chunk of queries against every key."""
        return queries @ self.keys.T

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        k = positive_int(k, "k")
        queries = as_matrix(queries, "queries", self.dim)
        ids, sims = empty_result(queries.shape[0], k)
        if self.count == 0:
            return ids, sims
        width = min(k, self.count)
        for start in range(0, queries.shape[0], self.chunk_rows):
            block = self._scores(queries[start:start + self.chunk_rows])
            step = max(1, SELECT_BUDGET // self.count)
            for row in range(0, block.shape[0], step):
                part = block[row:row + step]
                top_ids = self._select(part, width)
                rows = slice(start + row, start + row + part.shape[0])
                ids[rows, :width] = top_ids
                sims[rows, :width] = np.take_along_axis(part, top_ids, axis=1)
            del block
        return ids, sims

    @staticmethod
    def _select(scores: np.ndarray, width: int) -> np.ndarray:
        """Per row, the ids of the `width` largest scores, by descending score then ascending id."""
        n_rows, n_keys = scores.shape
        if width < n_keys:
            # The width-th largest value of each row; every larger score is in, and of the scores
            # equal to it only the smallest ids that still fit.
            threshold = np.partition(scores, n_keys - width, axis=1)[:, n_keys - width, None]
            above = scores > threshold
            tied = scores == threshold
            room = width - above.sum(axis=1, keepdims=True)
            chosen = above | (tied & (np.cumsum(tied, axis=1, dtype=np.int32) <= room))
            top = np.nonzero(chosen)[1].reshape(n_rows, width)  # ascending ids per row
        else:
            top = np.broadcast_to(np.arange(n_keys, dtype=np.int64), (n_rows, n_keys))
        values = np.take_along_axis(scores, top, axis=1)
        order = np.argsort(-values, axis=1, kind="stable")
        return np.take_along_axis(top, order, axis=1).astype(np.int64, copy=False)


def top_k_search(keys: np.ndarray, device: str) -> Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]:
    """Exact top-k by inner product on `device`: a torch matrix product on the GPU, ExactIndex on the CPU."""
    if not device.startswith("cuda"):
        return ExactIndex(keys).search
    import torch

    key_tensor = torch.from_numpy(keys).to(device)

    def search(queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        ids, sims = [], []
        for start in range(0, len(queries), CHUNK_ROWS):
            scores = torch.from_numpy(queries[start:start + CHUNK_ROWS]).to(device) @ key_tensor.T
            top = torch.topk(scores, min(k, key_tensor.shape[0]), dim=1)
            ids.append(top.indices.cpu().numpy())
            sims.append(top.values.float().cpu().numpy())
        return np.vstack(ids).astype(np.int64), np.vstack(sims)
    return search
