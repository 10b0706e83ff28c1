"""Paired significance tests for comparing two systems on the same test inputs."""

from __future__ import annotations

import math

import numpy as np
import scipy.stats

from raexmc.errors import ConfigError, DataError


def _paired(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both inputs as float arrays, checked to be paired: 1-D, same length, at least two pairs."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.ndim != 1 or b.ndim != 1:
        raise DataError(f"paired scores must be 1-D, got shapes {a.shape} and {b.shape}")
    if a.size != b.size:
        raise DataError(f"paired scores differ in length: {a.size} and {b.size}")
    if a.size < 2:
        raise DataError(f"a paired t-test needs at least two pairs, got {a.size}")
    return a, b


def paired_ttest(a: np.ndarray, b: np.ndarray, confidence: float = 0.95) -> dict[str, float | int]:
    """Two-sided paired t-test of a against b, with a confidence interval for mean(a - b).

    Per-input metric values of two systems are paired by test input, so the test looks at their
    differences. Constant differences have no spread, where scipy would warn and return nan: all
    zero gives t = 0 and p = 1; a nonzero constant gives t = +-inf and p = 0; both a zero-width CI.
    Values are plain Python numbers so the result can go straight into JSON.
    """
    if not 0.0 < confidence < 1.0:
        raise ConfigError(f"confidence must be in (0, 1), got {confidence}")
    a, b = _paired(a, b)
    diff = a - b
    n = diff.size
    mean_diff = float(diff.mean())
    if np.all(diff == diff[0]):
        t = 0.0 if mean_diff == 0.0 else math.copysign(math.inf, mean_diff)
        p_value = 1.0 if mean_diff == 0.0 else 0.0
        half_width = 0.0
    else:
        result = scipy.stats.ttest_rel(a, b)
        t, p_value = float(result.statistic), float(result.pvalue)
        std_err = float(diff.std(ddof=1)) / math.sqrt(n)
        half_width = float(scipy.stats.t.ppf(0.5 + confidence / 2.0, n - 1)) * std_err
    return {
        "mean_a": float(a.mean()),
        "mean_b": float(b.mean()),
        "mean_diff": mean_diff,
        "ci_low": mean_diff - half_width,
        "ci_high": mean_diff + half_width,
        "t": t,
        "p_value": p_value,
        "n": n,
    }
