"""RAE-XMC's inference as the paper writes it, in dense numpy, the tests' oracle for `RaeModel`: keys [X; Z],
values [λ·Y; (1−λ)·I], p = softmax(q·k/τ + log n) over the top b, scores p·V. Small sizes only.
"""

from __future__ import annotations

import math

import numpy as np


def reference_scores(Q: np.ndarray, X: np.ndarray, Z: np.ndarray, Y: np.ndarray, lam: float, tau: float, b: int,
                     label_share: float | None = None, log_counts: np.ndarray | None = None) -> np.ndarray:
    """Dense RAE scores; `label_share` None: joint retrieval, a number: split; ties to the smaller key id."""
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
