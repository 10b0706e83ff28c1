"""The knowledge memory: keys K = [X_train; Z_labels] and their values.

Key ids 0..N-1 are training inputs, N..N+L-1 labels. RAE searches the joint keys; its baselines
search their own key sets, so that a dual encoder is a top-b over the label keys alone and kNN a
top-b over the training-input keys alone (on the joint top-b, input keys can crowd labels out).
Only those two key sets are indexed: the joint top-b is the merge of their top-b (merge.py).
The values' input part is Y_train (the label part, the identity, is implicit); the package stage
saves them with the model (rae/model_folder.py).
"""

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
    """The keys an exact index searches, saved as `path` (a KEYS_FILE), refused where they are read when a value is
    not finite (the index itself would name no file), saying `fix`."""
    keys = load_array(path)
    if keys.ndim == 2 and not np.isfinite(keys).all():  # another shape: load_index names the file
        row = np.flatnonzero(~np.isfinite(keys).all(axis=1))[0]
        raise DataError(f"this key holds NaN or infinite values: {fix}", path, f"row {row}")
    return keys


def memory_keys(embeddings: str | os.PathLike, key_set: str = "joint") -> np.ndarray:
    """The keys of `key_set` as one float32 matrix, stacked in key-id order."""
    return stack_rows([(load_embeddings(embeddings, split), None) for split in KEY_SETS[key_set]])


def stack_rows(parts: list[tuple[np.ndarray, np.ndarray | None]]) -> np.ndarray:
    """One float32 matrix of the rows (None: all) of each part in turn, filled a block of rows at a time:
    no copy of a part (at 1.3M inputs 0.55 GB) beside the result, whatever the parts' storage dtype."""
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
    """The values' input part: binary Y_train as in the paper, or the stored relevance when "graded".

    `copy=False` hands Y_train over: its arrays become the values' where they can (a float64 CSR's all
    do), so a matrix of millions of rows is not held twice; the caller must not use it afterwards.
    """
    values = sp.csr_matrix(Y_train, dtype=np.float64, copy=copy)
    values.eliminate_zeros()
    if relevance == "binary":
        values.data[:] = 1.0
    return values

