"""Checking a catalogue entry before its source works: a bad value is a ConfigError naming its file and key."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .catalogue import entry_file


class EntryCheck:
    """An entry with its defaults filled in; a key the source does not know is rejected."""

    def __init__(self, name: str, spec: dict[str, Any], kind: str, known: Sequence[str], defaults: dict[str, Any]):
        self.name = name
        unknown = sorted(set(spec) - {"source", *known})
        if unknown:
            raise self.fail(unknown[0], f"unknown key '{unknown[0]}' for a {kind} dataset (known: {', '.join(known)})")
        self.values = {**defaults, **spec}

    def fail(self, key: str, message: str) -> ConfigError:
        return ConfigError(message, entry_file(self.name), key)

    def integer(self, key: str, low: int) -> int:
        value = self.values.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise self.fail(key, f"'{key}' must be an integer >= {low}, got {value!r}")
        return value

    def fraction(self, key: str) -> float:
        value = self.values.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
            raise self.fail(key, f"'{key}' must be a number in (0, 1), got {value!r}")
        return float(value)

    def path(self, key: str) -> Path:
        """A path written as text: YAML reads `path: 5` as a number and `path:` as null, neither of them a path."""
        value = self.values.get(key)
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, f"'{key}' must be a path (text), got {value!r}")
        return Path(value).expanduser()
