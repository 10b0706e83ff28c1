"""Exact nearest-key search by inner product: the ground truth, the backend for small data, and training's search."""

from __future__ import annotations

import warnings

import numpy as np

from ..checks import positive_int
from .search import Index, as_matrix, power_of_two_rows

# Elements (not bytes) of scratch space the exact top-k selection may use beside the similarity block.
SELECT_BUDGET = 1 << 20
# Bytes of one similarity block (queries x keys, float32): what bounds the search's memory however many keys
# there are (at 3.4M keys, 19 queries a block). A block of 4,096 queries against 3.4M keys would be 56 GB.
BLOCK_BYTES = 256 << 20
# Queries a block holds at most even when the budget allows more: larger blocks buy no speed, and small key
# sets keep the blocks (so the BLAS rounding, so the results) they had before the byte budget.
CHUNK_ROWS = 4096


def block_rows(n_keys: int, block_bytes: int = BLOCK_BYTES, max_rows: int = CHUNK_ROWS) -> int:
    """Queries per similarity block: the float32 rows of `n_keys` that `block_bytes` holds."""
    return power_of_two_rows(block_bytes, 4 * max(n_keys, 1), max_rows)


class ExactIndex(Index):
    """Exact inner-product top-k, a matrix product per block of queries sized by a byte budget (one similarity
    block at a time); ties to the smaller id, so duplicate keys give deterministic results."""

    backend = "exact"
    shown = ("count", "dim", "chunk_rows", "block_bytes")  # what repr() says
    count = property(lambda self: self.keys.shape[0])
    dim = property(lambda self: self.keys.shape[1])

    def __init__(self, keys: np.ndarray, chunk_rows: int = CHUNK_ROWS, block_bytes: int = BLOCK_BYTES):
        self.keys = as_matrix(keys, "keys")
        self.chunk_rows = positive_int(chunk_rows, "chunk_rows")
        self.block_bytes = positive_int(block_bytes, "block_bytes")

    @property
    def query_block(self) -> int:
        """Queries searched together: a query's similarities (the BLAS's rounding) depend on its block's shape."""
        return block_rows(self.count, self.block_bytes, self.chunk_rows)

    def _scores(self, queries: np.ndarray) -> np.ndarray:
        """A block's similarities to every key through torch's MKL (which numerics pins), not NumPy's OpenBLAS."""
        import torch  # here: a stage that only builds or loads an index never pays for it

        with warnings.catch_warnings():  # read-only memmaps are only read here
            warnings.simplefilter("ignore", UserWarning)
            keys, block = torch.from_numpy(self.keys), torch.from_numpy(queries)
        return block.matmul(keys.T).numpy()

    def _block(self, queries, width, k):
        scores, step = self._scores(queries), max(1, SELECT_BUDGET // self.count)
        top_ids = np.vstack([self._select(scores[row:row + step], width) for row in range(0, len(scores), step)])
        return top_ids, np.take_along_axis(scores, top_ids, axis=1)

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

