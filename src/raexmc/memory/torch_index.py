"""The exact backend on a GPU: the product in fp16 (unit keys' products are far inside its range), each query's
best `pool_size(k)` keys rescored in fp32, so answers are an fp32 search's unless fp16 moves a key past that margin.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..checks import positive_int
from .exact import BLOCK_BYTES, ExactIndex
from .search import Index, as_matrix, power_of_two_rows

# Share of the device's free memory (after the keys are uploaded) that one block's tensors may take: the rest
# is slack for the caching allocator and for the other key set's index, uploaded after this one.
DEVICE_SHARE = 0.5
# Queries a block holds at most: past some thousands a block buys no more speed, only a larger result to copy back.
MAX_BLOCK_ROWS = 1 << 14
# Bytes of fp32 candidate keys gathered at once to rescore a block (its rows go through in slices).
RESCORE_BYTES = 256 << 20
# Candidates beyond k rescored in fp32 after a half-precision product: k // 4, at least this many.
MIN_MARGIN = 16


def pool_size(k: int, n_keys: int, rescored: bool) -> int:
    """Keys each query takes from the product's top-k: k plus a margin when they are rescored in fp32."""
    return min(n_keys, k + max(MIN_MARGIN, k // 4) if rescored else k)


def block_rows_for(free_bytes: int, n_keys: int, dim: int, score_bytes: int, max_rows: int = MAX_BLOCK_ROWS) -> int:
    """Queries per block that fit in `free_bytes`: the similarities twice (torch.topk's scratch) and the queries."""
    return power_of_two_rows(free_bytes, 2 * n_keys * score_bytes + dim * (4 + score_bytes), max_rows)


class TorchIndex(Index):
    """Exact top-k by torch on `device`: ties by ascending id among the keys torch.topk took."""

    shown = ("count", "dim", "device", "half", "query_block")  # what repr() says
    backend = "exact"

    def __init__(self, keys: np.ndarray, device: str = "cpu", half: bool | None = None, free_bytes: int | None = None):
        import torch

        keys = as_matrix(keys, "keys")
        self.device = device
        self.count, self.dim = keys.shape
        self.half = device.startswith("cuda") if half is None else half
        with warnings.catch_warnings():  # a read-only memmap: torch only reads it
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            exact_keys = torch.from_numpy(keys).to(device)
        self.keys = exact_keys.half() if self.half else exact_keys
        self.exact_keys = exact_keys if self.half else None   # the rescoring's
        if free_bytes is None:  # what a block may take: DEVICE_SHARE of a GPU's free memory, the CPU's BLOCK_BYTES
            on_gpu = device.startswith("cuda")  # (however little is free, a block of one query)
            free_bytes = int(torch.cuda.mem_get_info(torch.device(device))[0] * DEVICE_SHARE) if on_gpu else BLOCK_BYTES
        else:
            free_bytes = positive_int(free_bytes, "free_bytes")
        self.query_block = block_rows_for(free_bytes, self.count, self.dim, self.keys.element_size())

    def _block(self, queries, width, k):
        import torch

        with torch.inference_mode():
            block = torch.from_numpy(queries).to(self.device)
            scores = block.to(self.keys.dtype) @ self.keys.T
            top = torch.topk(scores, pool_size(k, self.count, self.half), dim=1, sorted=False)
            del scores
            top_sims = self._rescored(block, top.indices) if self.half else top.values
            top_ids, top_sims = _by_score_then_id(top.indices, top_sims.float(), width)
            return top_ids.cpu().numpy(), top_sims.cpu().numpy()

    def _rescored(self, block, candidates):
        """The fp32 similarities of each query to its candidate keys, a slice of rows at a time."""
        import torch

        step = max(1, RESCORE_BYTES // (candidates.shape[1] * self.dim * 4))
        return torch.cat([torch.bmm(self.exact_keys[candidates[row:row + step]], block[row:row + step, :, None])[..., 0]
                          for row in range(0, block.shape[0], step)])


def _by_score_then_id(ids, sims, width: int):
    """The first `width` of each row by descending similarity, ties by ascending id."""
    import torch

    by_id = torch.argsort(ids, dim=1)
    ids, sims = ids.gather(1, by_id), sims.gather(1, by_id)
    order = torch.sort(sims, dim=1, descending=True, stable=True).indices[:, :width]
    return ids.gather(1, order), sims.gather(1, order)


def exact_index(keys: np.ndarray, device: str = "cpu") -> TorchIndex | ExactIndex:
    """Exact top-k on `device`: TorchIndex on a GPU, ExactIndex on the CPU."""
    return TorchIndex(keys, device) if device.startswith("cuda") else ExactIndex(keys)
