"""RAE-XMC's inference on one screen, as the paper writes it, in dense numpy: the tests' oracle for `RaeModel`.

Knowledge memory: keys K = [X; Z] (training inputs, then labels), values V = [λ·Y; (1−λ)·I_L]. A query q retrieves
keys by similarity q·k: the paper's joint top-b of K, or split (the top b_z = round(share·b) labels and the top
b − b_z inputs). It weighs them p = softmax(q·k/τ + log n), n a merged input key's member count where the memory has
the prior (memory/prior.py; 0 otherwise), and scores the labels p·V. O(queries × keys) memory: small sizes only.
"""

from __future__ import annotations

import math

import numpy as np


def reference_scores(Q: np.ndarray, X: np.ndarray, Z: np.ndarray, Y: np.ndarray, lam: float, tau: float, b: int,
                     label_share: float | None = None, log_counts: np.ndarray | None = None) -> np.ndarray:
    """Dense (queries × labels) RAE scores of query embeddings Q against input keys X (values Y, dense 0/1 or
    graded) and label keys Z; `label_share` None: joint retrieval, a number: split; similarity ties to the smaller
    key id."""
    N, L = len(X), len(Z)
    V = np.vstack([lam * np.asarray(Y, dtype=np.float64), (1 - lam) * np.eye(L)])
    S = np.asarray(Q, dtype=np.float64) @ np.vstack([X, Z]).astype(np.float64).T
    prior = np.concatenate([np.zeros(N) if log_counts is None else log_counts, np.zeros(L)])
    scores = np.zeros((len(Q), L))
    for q, s in enumerate(S):
        if label_share is None:
            kept = np.argsort(-s, kind="stable")[:b]
        else:
            b_z = math.floor(label_share * b + 0.5)
            kept = np.concatenate([np.argsort(-s[:N], kind="stable")[:b - b_z],
                                   N + np.argsort(-s[N:], kind="stable")[:b_z]])
        logits = s[kept] / tau + prior[kept]
        weights = np.exp(logits - logits.max())
        scores[q] = weights / weights.sum() @ V[kept]
    return scores
