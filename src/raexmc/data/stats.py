"""Label frequencies: the head/torso/tail/xtail segments (for stats.json and macro-F1) and stats.json's counts."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

# Label segments by training frequency, each a half-open range (low, high], head first.
SEGMENTS: dict[str, tuple[float, float]] = {"head": (1000, np.inf), "torso": (100, 1000), "tail": (10, 100),
                                           "xtail": (0, 10)}
UNSEEN = "unseen"  # labels with no training input: reported on their own, never as xtail


def label_frequency(Y: sp.csr_matrix) -> np.ndarray:
    return np.bincount(Y.indices, minlength=Y.shape[1]).astype(np.int64)


def segment_of(train_label_freq: np.ndarray) -> np.ndarray:
    freq = np.asarray(train_label_freq)
    in_segment = [(freq > low) & (freq <= high) for low, high in SEGMENTS.values()]
    return np.select(in_segment, list(SEGMENTS), default=UNSEEN)


def dataset_stats(Y_train: sp.csr_matrix, Y_test: sp.csr_matrix) -> dict[str, Any]:
    """stats.json: sizes, averages, labels per frequency segment, inputs without labels (kept: by the XC
    convention they count in the metrics' denominators) and test labels never seen in training."""
    train_freq = label_frequency(Y_train)
    segment = segment_of(train_freq)
    test_freq = label_frequency(Y_test)
    n_train, num_labels = Y_train.shape
    return {"N_train": int(n_train), "N_test": int(Y_test.shape[0]), "L": int(num_labels),
            "avg_labels_per_input": round(float(Y_train.nnz / max(n_train, 1)), 4),
            "avg_inputs_per_label": round(float(Y_train.nnz / max(num_labels, 1)), 4),
            "avg_labels_per_test_input": round(float(Y_test.nnz / max(Y_test.shape[0], 1)), 4),
            "labels_per_segment": {name: int((segment == name).sum()) for name in (*SEGMENTS, UNSEEN)},
            "inputs_without_labels": {split: int((np.diff(Y.indptr) == 0).sum())
                                      for split, Y in (("train", Y_train), ("test", Y_test))},
            "test_labels_unseen_in_train": int(((test_freq > 0) & (train_freq == 0)).sum())}
