"""The dataset catalogue: datasets/<name>.yaml beside params.yaml, one file an entry; `data.name` picks one, so the
download stage depends on that entry alone (no params key could: DVC splits keys at dots, dataset names hold them)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..settings import Settings, read_mapping

CATALOGUE_DIR = "datasets"
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def entry_file(name: str) -> str:
    return f"{CATALOGUE_DIR}/{name}.yaml"


def catalogue_dir(params_path: str | os.PathLike) -> Path:
    return Path(params_path).parent / CATALOGUE_DIR


def catalogue(folder: Path) -> dict[str, dict[str, Any]]:
    return {path.stem: read_mapping(path, "dataset entry") for path in sorted(folder.glob("*.yaml"))}


def dataset_spec(settings: Settings, params_path: str | os.PathLike) -> tuple[str, dict[str, Any]]:
    """The selected dataset's name and its entry (datasets/<data.name>.yaml beside `params_path`)."""
    name = settings.data.name
    if not _SAFE_NAME.match(name):
        raise ConfigError(f"dataset name '{name}' must be a plain folder name", params_path, "data.name")
    folder = catalogue_dir(params_path)
    path = folder / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in folder.glob("*.yaml"))) or "none"
        raise ConfigError(f"unknown dataset '{name}': no {path} (known: {known}); add the file to add the dataset",
                          params_path, "data.name")
    return name, read_mapping(path, "dataset entry")
