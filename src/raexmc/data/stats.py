"""Dataset counts and the paper's label-frequency segments."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from ..metrics import SEGMENTS, UNSEEN, segment_of


def label_frequency(Y: sp.csr_matrix) -> np.ndarray:
    """Number of inputs that have each label (non-zero entries per column)."""
    return np.bincount(Y.indices, minlength=Y.shape[1]).astype(np.int64)


def segment_counts(train_freq: np.ndarray) -> dict[str, int]:
    """Labels per frequency segment (head, torso, tail, xtail), plus labels no training input has."""
    segment = segment_of(train_freq)
    return {name: int((segment == name).sum()) for name in (*SEGMENTS, UNSEEN)}


def dataset_stats(Y_train: sp.csr_matrix, Y_test: sp.csr_matrix) -> dict[str, Any]:
    """stats.json: sizes, averages, segment sizes and test labels never seen in training."""
    train_freq = label_frequency(Y_train)
    test_freq = label_frequency(Y_test)
    n_train, num_labels = Y_train.shape
    return {
        "N_train": int(n_train),
        "N_test": int(Y_test.shape[0]),
        "L": int(num_labels),
        "avg_labels_per_input": round(float(Y_train.nnz / max(n_train, 1)), 4),
        "avg_inputs_per_label": round(float(Y_train.nnz / max(num_labels, 1)), 4),
        "avg_labels_per_test_input": round(float(Y_test.nnz / max(Y_test.shape[0], 1)), 4),
        "labels_per_segment": segment_counts(train_freq),
        "test_labels_unseen_in_train": int(((test_freq > 0) & (train_freq == 0)).sum()),
    }
