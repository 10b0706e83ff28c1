"""The knowledge memory's keys: K = [X_train; Z_labels], key ids 0..N-1 inputs, N..N+L-1 labels."""

from __future__ import annotations

import os

import numpy as np

from .embedding import load_embeddings


def memory_keys(embeddings: str | os.PathLike) -> np.ndarray:
    """Training-input then label embeddings, stacked as float32 (the index's key order)."""
    train, labels = load_embeddings(embeddings, "train"), load_embeddings(embeddings, "labels")
    keys = np.empty((train.shape[0] + labels.shape[0], train.shape[1]), dtype=np.float32)
    keys[: train.shape[0]] = train
    keys[train.shape[0]:] = labels
    return keys
