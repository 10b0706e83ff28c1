"""The one loader for params.yaml.

`dvc exp run -S` rewrites params.yaml as YAML 1.2 (where `1e-4` is a float, unlike YAML 1.1), so
the file is read with a YAML 1.2 parser, and every lookup names the key that is missing or wrong.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from .errors import ConfigError

_MISSING = object()


class Params:
    """Read-only view of params.yaml with dotted-key lookups that fail with a clear message."""

    def __init__(self, data: dict[str, Any], path: str | os.PathLike = "params.yaml"):
        self.data = data
        self.path = str(path)

    def get(self, key: str, default: Any = _MISSING) -> Any:
        node: Any = self.data
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                if default is _MISSING:
                    raise ConfigError(f"missing parameter '{key}'", self.path, key)
                return default
            node = node[part]
        return node

    def typed(self, key: str, kind: type | tuple[type, ...], default: Any = _MISSING) -> Any:
        """`get` plus a type check (ints are accepted where floats are expected)."""
        value = self.get(key, default)
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if float in kinds and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            names = " or ".join(k.__name__ for k in kinds)
            raise ConfigError(f"parameter '{key}' must be {names}, got {value!r}", self.path, key)
        return value

    def section(self, key: str) -> dict[str, Any]:
        return dict(self.typed(key, dict))


def _plain(node: Any) -> Any:
    """ruamel's round-trip containers to plain dicts and lists."""
    if isinstance(node, dict):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node


def load_params(path: str | os.PathLike = "params.yaml") -> Params:
    path = Path(path)
    if not path.is_file():
        raise ConfigError("params file not found", path)
    try:
        data = YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8"))
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = None if mark is None else mark.line + 1
        raise ConfigError(f"invalid YAML ({getattr(exc, 'problem', exc)})", path, line) from None
    if not isinstance(data, dict):
        raise ConfigError("top level must be a mapping", path)
    return Params(_plain(data), path)
