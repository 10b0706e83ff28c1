"""The one loader for params.yaml.

`dvc exp run -S` rewrites params.yaml as YAML 1.2 (where `1e-4` is a float, unlike YAML 1.1), so
the file is read with a YAML 1.2 parser, and every lookup names the key that is missing or wrong.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from .errors import ConfigError

_MISSING = object()

# The keys of the sections whose readers take single keys (train and tokenize check their own sections, data
# is checked by the download stage): a key not listed here is a typo that would otherwise leave
# its default in force without a word, so loading refuses it.
KNOWN_KEYS = {
    "encoder": ("name", "mode"),
    "embed": ("nproc", "torchrun_args", "device", "precision", "dtype", "batch_size", "threads"),
    "index": ("backend", "M", "ef_construction", "threads"),
    "search": ("device",),
    "memory": ("keep", "keep_grid", "method", "prior", "seed", "compression", "prototypes", "prototypes_grid"),
    "infer": ("lambda", "b", "retrieval", "label_share", "label_share_grid", "tau", "tau_grid", "auto_metric",
              "val_fraction", "val_max_queries", "val_seed", "val_folds", "ef_search", "lambda_sweep", "b_sweep",
              "relevance", "ova_knn", "query_lambda"),
    "evaluate": ("propensity", "threads"),
    "significance": ("metrics", "compare_with"),
    "package": ("register", "model_name", "alias"),
}


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

    def integer(self, key: str, minimum: int) -> int:
        """An integer parameter >= `minimum` (True is not one), or ConfigError naming it."""
        value = self.typed(key, int)
        if value < minimum:
            raise ConfigError(f"parameter '{key}' must be an integer >= {minimum}, got {value!r}", self.path, key)
        return value

    def checked(self, key: str, values: list, check: Callable[[Any], Any], text: str, shown: Any) -> tuple:
        """Each of `values` through `check` (True and False are not numbers here), or one ConfigError naming
        `key` that says the value must be `text` and shows `shown`."""
        try:
            if not values or any(isinstance(v, bool) for v in values):
                raise ConfigError(text)
            return tuple(check(v) for v in values)
        except ConfigError:
            raise ConfigError(f"{key} must be {text}, got {shown!r}", self.path, key) from None

    def grid(self, key: str, check: Callable[[Any], Any], text: str) -> tuple:
        """A non-empty list parameter, each entry through `check` (which raises ConfigError on a bad one)."""
        values = self.get(key)
        return self.checked(key, values if isinstance(values, list) else [], check, f"a non-empty list of {text}",
                            values)


def check_known_keys(data: dict[str, Any], path: str | os.PathLike) -> None:
    """ConfigError naming the first key of a KNOWN_KEYS section that the code does not read."""
    for section, known in KNOWN_KEYS.items():
        values = data.get(section)
        for key in values if isinstance(values, dict) else ():
            if key not in known:
                raise ConfigError(f"unknown parameter '{section}.{key}' (the {section} section knows "
                                  f"{', '.join(known)})", path, f"{section}.{key}")


def _plain(node: Any) -> Any:
    """ruamel's round-trip containers to plain dicts and lists."""
    if isinstance(node, dict):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node


def load_params(path: str | os.PathLike = "params.yaml") -> Params:
    data = read_mapping(path, "params file")
    check_known_keys(data, path)
    return Params(data, path)


def read_mapping(path: str | os.PathLike, what: str) -> dict[str, Any]:
    """The YAML 1.2 mapping in file `path` (`what` it is, for the error when it is missing) as plain dicts and
    lists; the ConfigError of a bad file names its line where it has one."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{what} not found", path)
    try:
        data = YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8"))
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = None if mark is None else mark.line + 1
        raise ConfigError(f"invalid YAML ({getattr(exc, 'problem', exc)})", path, line) from None
    if not isinstance(data, dict):
        raise ConfigError("top level must be a mapping", path)
    return _plain(data)
