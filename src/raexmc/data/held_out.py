"""Which training inputs are held out of the memory to validate on: training's validation split, the tune stage's
folds, and the seeded subset of them that queries. Never the test set."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def split_validation(Y: sp.csr_matrix, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, validation rows) of the training inputs: validation is never the test set."""
    return validation_folds(Y.shape[0], fraction, seed, 1)[0]


def validation_folds(num_inputs: int, fraction: float, seed: int, folds: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(memory rows, validation rows) of `folds` disjoint validation sets, each `fraction` of the training inputs
    (folds x fraction <= 1), each with every other input as its memory. The first is split_validation's, so that
    one fold is the split that training validates on."""
    if folds < 1 or folds * int(round(num_inputs * fraction)) > num_inputs:
        raise ValueError(f"{folds} disjoint folds of {fraction} of {num_inputs} inputs do not fit")
    order = np.random.default_rng([seed, 7]).permutation(num_inputs)
    n_val = int(round(num_inputs * fraction))
    starts = [fold * n_val for fold in range(folds)]
    return [(np.sort(np.concatenate([order[:start], order[start + n_val:]])), np.sort(order[start:start + n_val]))
            for start in starts]


def query_sample(held_out: np.ndarray, cap: int, seed: int) -> np.ndarray:
    """At most `cap` of the `held_out` rows, a subset drawn with `seed`, in their order; all of them when they fit.

    Validation (training's and the tune stage's) queries a memory of every other training input, so
    its exact search costs held-out x N: capping the queries keeps that linear in N."""
    if len(held_out) <= cap:
        return held_out
    picked = np.random.default_rng([seed, 11]).choice(len(held_out), size=cap, replace=False)
    return held_out[np.sort(picked)]
