"""The library's check of a count it is handed: a bad one is a programming error (users' values: settings.py)."""

from __future__ import annotations

import numpy as np


def positive_int(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)
