"""The dataset catalogue in params.yaml: `data.name` picks an entry of `datasets`."""

from __future__ import annotations

import re
from typing import Any

from ..errors import ConfigError
from ..params import Params

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def dataset_spec(params: Params) -> tuple[str, dict[str, Any]]:
    """The selected dataset's name and its `datasets.<name>` entry."""
    name = params.typed("data.name", str)
    if not _SAFE_NAME.match(name):
        raise ConfigError(f"dataset name '{name}' must be a plain folder name", params.path, "data.name")
    catalogue = params.section("datasets")
    if name not in catalogue:
        raise ConfigError(f"unknown dataset '{name}' (known: {', '.join(sorted(catalogue))})", params.path, "data.name")
    return name, dict(catalogue[name])
