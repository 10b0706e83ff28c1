"""The knowledge memory: keys K = [X_train; Z_labels], their values, and the memory folder the predictor reads.

Key ids 0..N-1 are training inputs, N..N+L-1 labels. RAE searches the joint keys; its baselines
search their own key sets, so that a dual encoder is a top-b over the label keys alone and kNN a
top-b over the training-input keys alone (on the joint top-b, input keys can crowd labels out).
Only those two key sets are indexed: the joint top-b is the merge of their top-b (merge.py).
The values' input part is Y_train (the label part, the identity, is implicit). The package stage
writes the memory folder: the inference settings, Y_train, the label texts, the keys when the
index is exact (that backend keeps none), and files it copies in (the per-query λ model).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..data.dataset import Dataset
from ..encoder.vectors import load_embeddings
from ..errors import PARAMS_FILE, ConfigError
from ..io import atomic_dir, write_json

# Key set -> the embedding splits it stacks, in key-id order.
KEY_SETS: dict[str, tuple[str, ...]] = {
    "joint": ("train", "labels"),    # RAE: K = [X_train; Z_labels]
    "labels": ("labels",),           # the dual encoder
    "inputs": ("train",),            # kNN over training inputs
}
RELEVANCE = ("binary", "graded")
SETTINGS_FILE = "settings.json"
VALUES_FILE = "Y_train.npz"
LABEL_TEXTS_FILE = "label_texts.json"
KEYS_FILE = "keys.npy"
SETTINGS = ("lambda", "b", "tau", "ef_search", "relevance", "input_max_len", "input_fields")
GATHER_ROWS = 1 << 16  # rows `stack_rows` copies at once: its only scratch beside the result


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


def check_relevance(relevance: str) -> str:
    """`relevance` if it is one of RELEVANCE, else a ConfigError about infer.relevance."""
    if relevance not in RELEVANCE:
        raise ConfigError(f"infer.relevance must be one of {', '.join(RELEVANCE)}, got {relevance!r}",
                          PARAMS_FILE, "infer.relevance")
    return relevance


def training_values(Y_train: sp.spmatrix, relevance: str = "binary", copy: bool = True) -> sp.csr_matrix:
    """The values' input part: binary Y_train as in the paper, or the stored relevance when "graded".

    `copy=False` hands Y_train over: its arrays become the values' where they can (a float64 CSR's all
    do), so a matrix of millions of rows is not held twice; the caller must not use it afterwards.
    """
    check_relevance(relevance)
    values = sp.csr_matrix(Y_train, dtype=np.float64, copy=copy)
    values.eliminate_zeros()
    if relevance == "binary":
        values.data[:] = 1.0
    return values


def write_memory(folder: str | os.PathLike, dataset: Dataset, settings: dict[str, Any],
                 keys: np.ndarray | None = None, copies: tuple[str | os.PathLike, ...] = (),
                 values: sp.csr_matrix | None = None) -> None:
    """Write the memory folder atomically, with the files and folders of `copies` copied in under their
    names; `settings` needs every key of SETTINGS. `values` replace Y_train when RAE's input keys are
    not the training inputs (a smaller memory: memory/input_memory.py)."""
    missing = [name for name in SETTINGS if name not in settings]
    if missing:
        raise ValueError(f"settings lack {', '.join(missing)}")
    Y_train = values
    if Y_train is None:
        Y_train = training_values(dataset.label_matrix("train"), settings["relevance"], copy=False)
    with atomic_dir(folder) as tmp:
        write_json(tmp / SETTINGS_FILE, {**settings, "num_train": Y_train.shape[0], "num_labels": Y_train.shape[1]})
        sp.save_npz(tmp / VALUES_FILE, Y_train)
        write_json(tmp / LABEL_TEXTS_FILE, [label.title for label in dataset.texts("labels")])
        if keys is not None:
            np.save(tmp / KEYS_FILE, np.asarray(keys, dtype=np.float32))
        for path in map(Path, copies):
            (shutil.copytree if path.is_dir() else shutil.copyfile)(path, tmp / path.name)
