"""Bench scripts are not a package: tests load them from their files, with their folder on sys.path
(as when the script runs, so that bench/peers scripts find peer_eval). Not a conftest.py: the tests'
top conftest is imported by name (`from conftest import REPO`), and a second one would shadow it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_bench_module(relative: str):
    path = BENCH / relative
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module

