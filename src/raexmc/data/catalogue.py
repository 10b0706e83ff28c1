"""The dataset catalogue in params.yaml: `data.name` picks an entry of `datasets`."""

from __future__ import annotations

import re
from typing import Any

from ..errors import PARAMS_FILE, ConfigError
from ..settings import Settings

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def dataset_spec(settings: Settings) -> tuple[str, dict[str, Any]]:
    """The selected dataset's name and its `datasets.<name>` entry."""
    name = settings.data.name
    if not _SAFE_NAME.match(name):
        raise ConfigError(f"dataset name '{name}' must be a plain folder name", PARAMS_FILE, "data.name")
    catalogue = settings.datasets
    if name not in catalogue:
        raise ConfigError(f"unknown dataset '{name}' (known: {', '.join(sorted(catalogue))})", PARAMS_FILE, "data.name")
    return name, dict(catalogue[name])
