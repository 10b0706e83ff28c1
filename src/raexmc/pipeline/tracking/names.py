"""Params and metrics under the names MLflow shows: dotted as in params.yaml, with only the characters it allows."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_NOT_ALLOWED = re.compile(r"[^\w./\- :]")


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}: params as they are named in params.yaml and `dvc exp show`."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def metric_name(name: str) -> str:
    """MLflow allows only [A-Za-z0-9_.-/: ] in names: "rae.P@1" becomes "rae.P_at_1"."""
    return _NOT_ALLOWED.sub("_", name.replace("@", "_at_"))
