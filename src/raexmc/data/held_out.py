"""Which training inputs are held out of the memory to validate on: training's validation split, the tune stage's
folds, and the seeded subset of them that queries. Never the test set."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..errors import PARAMS_FILE, ConfigError
from ..settings import Settings


@dataclass(frozen=True)
class SplitSource:  # the tune stage's split, and the params key its fraction came from (for errors)
    fraction: float
    seed: int
    fraction_key: str


def tune_split(settings: Settings, num_inputs: Callable[[], int] | None = None) -> SplitSource:
    """The split the tune stage validates on: for a fine-tuned encoder the inputs training held out (others would
    choose λ, τ and the memory on inputs it learnt), else infer.val_*. ConfigError when fine-tuning holds none or
    (given `num_inputs`) all of them out; the train stage calls it too, so the user hears it before training."""
    if settings.encoder.mode != "fine-tuned":
        return SplitSource(settings.infer.val_fraction, settings.infer.val_seed, "infer.val_fraction")
    fraction = settings.train.val_fraction
    inputs = None if num_inputs is None or fraction == 0 else num_inputs()
    held = None if inputs is None else int(round(inputs * fraction))  # as validation_folds rounds it
    if fraction == 0 or held == 0:
        of = "" if inputs is None else f" of {inputs:,} training inputs"
        raise ConfigError(f"train.val_fraction {fraction}{of} holds out no input with encoder.mode fine-tuned, and "
                          "the tune stage validates on the inputs fine-tuning held out; raise it (the default 0.05; "
                          "train.val_max_queries: 0 holds them out without validating each round)",
                          PARAMS_FILE, "train.val_fraction")
    if held is not None and held >= inputs:
        raise ConfigError(f"train.val_fraction {fraction} of {inputs:,} training inputs holds out every one, leaving "
                          "none to fine-tune on; lower it (the default 0.05)", PARAMS_FILE, "train.val_fraction")
    return SplitSource(fraction, settings.train.seed, "train.val_fraction")


def split_validation(Y: sp.csr_matrix, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    return validation_folds(Y.shape[0], fraction, seed, 1)[0]


def validation_folds(num_inputs: int, fraction: float, seed: int, folds: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(memory rows, validation rows) of `folds` disjoint validation sets of `fraction`, every other input memory."""
    n_val = int(round(num_inputs * fraction))
    if folds < 1 or folds * n_val > num_inputs:
        raise ValueError(f"{folds} disjoint folds of {fraction} of {num_inputs} inputs do not fit")
    order = np.random.default_rng([seed, 7]).permutation(num_inputs)
    starts = [fold * n_val for fold in range(folds)]
    return [(np.sort(np.concatenate([order[:start], order[start + n_val:]])), np.sort(order[start:start + n_val]))
            for start in starts]


def query_sample(held_out: np.ndarray, cap: int, seed: int) -> np.ndarray:
    """At most `cap` of the `held_out` rows (drawn with `seed`) in order: validation's search costs queries x N."""
    if len(held_out) <= cap:
        return held_out
    picked = np.random.default_rng([seed, 11]).choice(len(held_out), size=cap, replace=False)
    return held_out[np.sort(picked)]
