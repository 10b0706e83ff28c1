"""Checking a `datasets.<name>` entry of params.yaml before its source does any work, so that a
bad value fails at once with a ConfigError naming the key (params.yaml:datasets.<name>.<key>)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import PARAMS_FILE, ConfigError


class EntryCheck:
    """An entry with its defaults filled in; a key the source does not know is rejected."""

    def __init__(self, name: str, spec: dict[str, Any], kind: str, known: Sequence[str], defaults: dict[str, Any]):
        self.name = name
        unknown = sorted(set(spec) - {"source", *known})
        if unknown:
            raise self.fail(unknown[0], f"unknown key '{unknown[0]}' for a {kind} dataset (known: {', '.join(known)})")
        self.values = {**defaults, **spec}

    def fail(self, key: str, message: str) -> ConfigError:
        return ConfigError(message, PARAMS_FILE, f"datasets.{self.name}.{key}")

    def integer(self, key: str, low: int) -> int:
        value = self.values.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise self.fail(key, f"'{key}' must be an integer >= {low}, got {value!r}")
        return value
