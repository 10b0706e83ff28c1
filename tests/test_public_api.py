"""The public API: `import raexmc` is cheap (no torch, no numpy) and every name of __all__ loads on first use;
the package ships py.typed; `raexmc --version` prints the installed version."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import version

from tests.helpers import REPO, raexmc

LOADS_EVERY_NAME = """
import sys
import raexmc
heavy = sorted(name for name in ("torch", "numpy", "scipy", "transformers") if name in sys.modules)
assert not heavy, f"import raexmc imported {heavy}"
for name in raexmc.__all__:
    assert getattr(raexmc, name) is not None and name in dir(raexmc), name
assert raexmc.RaeModel.__module__ == "raexmc.rae.model"
try:
    raexmc.Nothing
except AttributeError as exc:
    assert "no attribute 'Nothing'" in str(exc)
else:
    raise AssertionError("raexmc.Nothing resolved")
"""


def test_import_raexmc_is_cheap_and_every_public_name_resolves():
    proc = subprocess.run([sys.executable, "-c", LOADS_EVERY_NAME], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_raexmc_version_prints_the_installed_version():
    proc = raexmc("--version", timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == f"raexmc {version('raexmc')}", proc.stderr


def test_the_wheel_ships_py_typed(tmp_path):
    """A wheel built from the project's pyproject.toml and src/ holds raexmc/py.typed (PEP 561)."""
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, tmp_path / name)
    shutil.copytree(REPO / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "-q",
                           "-w", "dist"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = (tmp_path / "dist").glob("raexmc-*.whl")
    assert "raexmc/py.typed" in zipfile.ZipFile(wheel).namelist()
