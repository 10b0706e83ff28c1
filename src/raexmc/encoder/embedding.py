"""Embedding a token cache: each split streamed into a .npy memmap in length-sorted batches (dealt out under
torchrun, rank 0 writing them); a row all zero or not finite stops the split."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import torch

from ..data.dataset import SPLITS
from ..errors import DataError
from ..io import new_memmap
from ..progress import progress_bar
from .text_encoder import TextEncoder, length_sorted_batches
from .tokens import TokenCache


def embed_splits(encoder: TextEncoder, cache: TokenCache, folder: Path | None, batch_size: int,
                 dtype: str = "float32", rank: int = 0, world_size: int = 1) -> dict[str, dict[str, float]]:
    """embed_split of every split into `folder`/<split>.npy (None on ranks other than 0); each one's throughput."""
    return {split: embed_split(encoder, cache, split, None if folder is None else Path(folder) / f"{split}.npy",
                               batch_size, dtype, rank, world_size) for split in SPLITS}


def embed_split(encoder: TextEncoder, cache: TokenCache, split: str, target: str | os.PathLike | None,
                batch_size: int, dtype: str = "float32", rank: int = 0, world_size: int = 1) -> dict[str, float]:
    lengths = cache.lengths(split)
    out = new_memmap(target, np.dtype(dtype), (len(lengths), encoder.dim)) if rank == 0 else None
    throughput = embed_tokens(encoder, cache.ids(split), lengths, out, batch_size, dtype,
                              cache.folder / f"{split}.ids.npy", f"embed {split}", rank, world_size)
    if out is not None:
        out.flush()
    return throughput


def embed_tokens(encoder: TextEncoder, ids: np.ndarray, lengths: np.ndarray, out: np.ndarray | None, batch_size: int,
                 dtype: str, source: Path, desc: str, rank: int = 0, world_size: int = 1) -> dict[str, float]:
    """Write the vectors of token rows, as `dtype`, into `out` (rank 0) in length-sorted batches, checked (a bad
    row named by its row of `source`); the throughput. Batch i goes to rank i % world_size: every text is embedded
    in the batch one process would use, so the file is one process's to the bit."""
    batches = length_sorted_batches(lengths, batch_size)
    started = time.perf_counter()
    with progress_bar(total=len(lengths), desc=desc, unit="text", mininterval=2.0, disable=rank != 0) as progress:
        for first in range(0, len(batches), world_size):
            round_batches = batches[first:first + world_size]
            mine = round_batches[rank] if rank < len(round_batches) else None  # the last round may leave ranks idle
            done = (mine, None if mine is None else encoder.embed(ids, lengths, mine).astype(dtype))
            for rows, vectors in gather_to_first(done, rank, world_size):  # on rank 0 only
                if rows is not None:
                    check_vectors(vectors, rows, source)
                    out[rows] = vectors
                    progress.update(len(rows))
    seconds = time.perf_counter() - started
    return {"texts": int(len(lengths)), "seconds": round(seconds, 2),
            "texts_per_s": round(len(lengths) / max(seconds, 1e-9), 1)}


def gather_to_first(item: object, rank: int, world_size: int) -> list:
    """Every rank's `item`, in rank order, on rank 0 (other ranks get [])."""
    if world_size == 1:
        return [item]
    items = [None] * world_size if rank == 0 else None
    torch.distributed.gather_object(item, items, dst=0)
    return items or []


def check_vectors(vectors: np.ndarray, rows: np.ndarray, source: Path) -> None:
    """DataError naming the first row whose vector is not finite or all zero: the encoder (or its precision) broke."""
    finite = np.isfinite(vectors).all(axis=1)
    bad = np.flatnonzero(~finite | ~vectors.any(axis=1))
    if len(bad):
        what = "is not finite" if not finite[bad[0]] else "is all zero"
        raise DataError(f"the embedding of this text {what}: check the encoder and embed.precision", source,
                        f"row {rows[bad[0]]}")
