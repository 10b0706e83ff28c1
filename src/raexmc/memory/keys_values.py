"""The knowledge memory: keys [X_train; Z_labels] (ids 0..N-1 inputs, then labels) and values, whose label part is
the implicit identity."""

from __future__ import annotations

import os

import numpy as np
import scipy.sparse as sp

from ..encoder.vectors import load_embeddings
from ..errors import DataError
from ..io import load_array

# Key set -> the embedding splits it stacks, in key-id order.
KEY_SETS: dict[str, tuple[str, ...]] = {
    "joint": ("train", "labels"),    # RAE: K = [X_train; Z_labels]
    "labels": ("labels",),           # the dual encoder
    "inputs": ("train",),            # kNN over training inputs
}
KEYS_FILE = "keys.npy"
GATHER_ROWS = 1 << 16  # rows `stack_rows` copies at once: its only scratch beside the result


def load_keys(path: str | os.PathLike, fix: str = "rerun the stage that writes it") -> np.ndarray:
    """The keys of an exact index saved as `path`; a key that is not finite is a DataError naming its row."""
    keys = load_array(path)
    if keys.ndim == 2 and not np.isfinite(keys).all():  # another shape: load_index names the file
        row = np.flatnonzero(~np.isfinite(keys).all(axis=1))[0]
        raise DataError(f"this key holds NaN or infinite values: {fix}", path, f"row {row}")
    return keys


def memory_keys(embeddings: str | os.PathLike, key_set: str = "joint") -> np.ndarray:
    """The keys of `key_set` as one float32 matrix, stacked in key-id order."""
    return stack_rows([(load_embeddings(embeddings, split), None) for split in KEY_SETS[key_set]])


def stack_rows(parts: list[tuple[np.ndarray, np.ndarray | None]]) -> np.ndarray:
    """One float32 matrix of the rows (None: all) of each part, filled a block at a time: no copy of a part."""
    counts = [len(part) if rows is None else len(rows) for part, rows in parts]
    keys = np.empty((sum(counts), parts[0][0].shape[1]), dtype=np.float32)
    start = 0
    for (part, rows), count in zip(parts, counts):
        for first in range(0, count, GATHER_ROWS):
            block = slice(first, min(first + GATHER_ROWS, count))
            keys[start + block.start:start + block.stop] = part[block] if rows is None else part[rows[block]]
        start += count
    return keys


def training_values(Y_train: sp.spmatrix, relevance: str = "binary", copy: bool = True) -> sp.csr_matrix:
    """Binary Y_train as in the paper, or its relevance when "graded"; `copy=False` hands Y_train over."""
    values = sp.csr_matrix(Y_train, dtype=np.float64, copy=copy)
    values.eliminate_zeros()
    if relevance == "binary":
        values.data[:] = 1.0
    return values

