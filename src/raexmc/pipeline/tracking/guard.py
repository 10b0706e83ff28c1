"""Refuse to log, or let DVC record, a stage's results unless it ran with the params its DVC command set.

`dvc exp run -S key=value` writes the value into the workspace's params.yaml before it takes any
lock, so a second experiment started in the same workspace rewrites the params under the first
one. A stage then reads (or logs under the first experiment's name) the second one's values. Each
stage therefore checks, before it logs anything, that params.yaml is byte for byte what it read at
its start and that it still holds every `-S` value of the `dvc exp run` that runs it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from ...errors import ConcurrentRunError
from .dvc_command import dvc_command, set_params

PARALLEL_HINT = ("run experiments side by side with `raexmc sweep` or `dvc exp run --queue` "
                 "(each runs in its own copy of the project)")
_MISSING = object()


class ParamsGuard:
    """The params file as a stage read it at its start."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.content = self._read()

    def _read(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return None

    def check(self) -> None:
        """ConcurrentRunError if the file changed since the stage read it."""
        if self._read() != self.content:
            raise ConcurrentRunError("changed while this stage ran (another `dvc exp run` in this workspace?), "
                                     f"so its results are not logged or kept; {PARALLEL_HINT}", self.path)

    def check_dvc_overrides(self, tree: dict[str, Any]) -> None:
        """ConcurrentRunError if the params `tree` (as read at the stage's start) lacks a `-S` value of the
        `dvc exp run` running this stage."""
        for file, key, text in set_params(dvc_command() or []):
            if Path(file).resolve() != self.path.resolve():
                continue
            wanted, found = _yaml_value(text), _dotted(tree, key)
            if wanted is not _MISSING and wanted != found:
                held = "nothing" if found is _MISSING else repr(found)
                raise ConcurrentRunError(
                    f"holds {held}, but the `dvc exp run` running this stage set {key}={text}: another "
                    f"`dvc exp run` in this workspace rewrote it, so nothing is logged or kept; {PARALLEL_HINT}",
                    self.path, key)


def _dotted(tree: dict[str, Any], key: str) -> Any:
    """The value at dotted `key` of a params tree; _MISSING where there is none."""
    node: Any = tree
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _yaml_value(text: str) -> Any:
    """An override's value as DVC writes it into the params file (YAML 1.2); _MISSING if unparsable."""
    try:
        return YAML(typ="safe", pure=True).load(text)
    except YAMLError:
        return _MISSING
