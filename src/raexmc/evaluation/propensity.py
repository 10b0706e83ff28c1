"""Label propensities (Jain et al. 2016) for PSP@k: rare labels get small p_l, so predicting them counts more."""

from __future__ import annotations

import math

import numpy as np

from ..errors import ConfigError
from ..params import Params

DEFAULT_AB = (0.55, 1.5)  # (A, B) of datasets outside the Amazon and Wikipedia families
PROPENSITY_AB: dict[str, tuple[float, float]] = {
    "amazon": (0.6, 2.6),
    "wikipedia": (0.5, 0.4),
    "default": DEFAULT_AB,
}


def propensities(
    train_label_freq: np.ndarray, num_train: int, A: float = DEFAULT_AB[0], B: float = DEFAULT_AB[1]
) -> np.ndarray:
    """Jain et al. (2016) propensities p_l = 1 / (1 + C (N_l + B)^-A), C = (ln N - 1)(B + 1)^A.

    Rare labels get small p_l, so PSP@k rewards predicting them correctly.
    """
    freq = np.asarray(train_label_freq, dtype=np.float64)
    c = (np.log(num_train) - 1.0) * (B + 1.0) ** A
    return 1.0 / (1.0 + c * np.exp(-A * np.log(freq + B)))


def propensity_ab(dataset_name: str) -> tuple[float, float]:
    """(A, B) for a dataset: Amazon and Wikipedia families have their own, others the default."""
    name = dataset_name.lower()
    if "amazon" in name:
        return PROPENSITY_AB["amazon"]
    if "wiki" in name:
        return PROPENSITY_AB["wikipedia"]
    return PROPENSITY_AB["default"]


def propensity_from_params(p: Params, dataset_name: str) -> tuple[float, float]:
    """`evaluate.propensity`: "auto" picks (A, B) by dataset family; else an explicit [A, B]."""
    value = p.get("evaluate.propensity")
    if value == "auto":
        return propensity_ab(dataset_name)
    A, B = p.checked("evaluate.propensity", value if isinstance(value, list) and len(value) == 2 else [],
                     _positive, "auto or two numbers [A, B] > 0", value)
    return A, B


def _positive(value: object) -> float:
    """`value` as a float, or ConfigError unless it is a finite number > 0 (the propensity formula's A and B)."""
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"not a finite number > 0: {value!r}")
    return float(value)
