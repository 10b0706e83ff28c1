"""The dataset catalogue: datasets/<name>.yaml beside params.yaml, one file an entry; `data.name` picks one, so the
download stage depends on that entry alone (no params key could: DVC splits keys at dots, dataset names hold them).
An entry is checked before its source works: a bad value is a ConfigError naming its file and key."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
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
