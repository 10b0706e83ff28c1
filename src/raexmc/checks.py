"""Range checks shared by the layers: a value a user sets, or a ConfigError naming it."""

from __future__ import annotations

import os

import numpy as np

from .errors import ConfigError


def positive_int(value: object, name: str, path: str | os.PathLike | None = None,
                 record: str | None = None) -> int:
    """`value` as an int, or ConfigError unless it is an integer >= 1 (True is not one)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(f"{name} must be an integer >= 1, got {value!r}", path, record)
    return int(value)


def one_of(value: object, choices: tuple[str, ...], name: str, path: str | os.PathLike | None = None,
           record: str | None = None) -> str:
    """`value`, or ConfigError unless it is one of `choices` (named in the message)."""
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}, got {value!r}", path, record)
    return value
