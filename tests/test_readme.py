"""The README's module map names every module of the package, so a newcomer's map has no holes."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def module_map() -> str:
    """The package part of the README's Development block that starts with `src/raexmc/` (up to `stages/`)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```\n(src/raexmc/\n.*?)```", readme, flags=re.S)
    assert len(blocks) == 1, "the README should have exactly one module map block"
    return blocks[0].split("\nstages/")[0]


def test_every_module_is_in_the_map():
    names = set(re.findall(r"[\w]+\.py", module_map()))
    modules = sorted({path.name for path in (REPO / "src" / "raexmc").rglob("*.py") if path.name != "__init__.py"})
    missing = [name for name in modules if name not in names]
    assert not missing, f"README module map lacks {missing}"


def test_every_name_in_the_map_exists():
    modules = {path.name for path in (REPO / "src" / "raexmc").rglob("*.py")}
    stale = sorted(set(re.findall(r"[\w]+\.py", module_map())) - modules)
    assert not stale, f"README module map names modules that do not exist: {stale}"
