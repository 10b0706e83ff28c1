"""dvc.yaml's deps cover the raexmc code each stage runs, so that editing it reruns the stage.

"The code a stage runs" is the union of the raexmc modules a fresh interpreter loads importing the stage script
(dynamic: imports through importlib too) and the modules its import statements name at any depth, lazy ones inside
functions included, transitively (static). Neither sees a module named only in a computed string (raexmc/__init__.py's
public names, which no stage reads). A dep covers a file when it is that file or a folder holding it."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections.abc import Iterable
from modulefinder import ModuleFinder
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from tests.helpers import REPO

PACKAGE = "raexmc"
SRC = REPO / "src"

# Run in a fresh interpreter: import the stage script without running it (its __name__ is not
# "__main__") and print the files of the raexmc modules that loaded.
PROBE = """
import json, runpy, sys
sys.path.insert(0, sys.argv[1])
runpy.run_path(sys.argv[2], run_name="dvc_deps_probe")
print(json.dumps({name: getattr(module, "__file__", None) for name, module in sys.modules.items()
                  if name == "raexmc" or name.startswith("raexmc.")}))
"""


def stages() -> dict[str, dict]:
    return YAML(typ="safe").load((REPO / "dvc.yaml").read_text())["stages"]


def stage_script(stage: dict) -> Path:
    match = re.search(r"\bstages/\S+\.py\b", stage["cmd"])
    assert match, f"no stages/*.py in cmd {stage['cmd']!r}"
    return REPO / match.group(0)


# test_layers.py reads the import statements of each module with it
def imported_names(path: Path, module: str | None) -> set[str]:
    """Dotted names every import statement of `path` may load, anywhere in the file (`from a import b`: a and a.b,
    as b may be a submodule); `module` is the file's own dotted name (None for a script), for relative imports."""
    package = None
    if module is not None:
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                assert package is not None, f"{path}: relative import in a script"
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def static_files(script: Path, src: Path, package: str = PACKAGE, start: Iterable[str] = ()) -> set[Path]:
    """Files of the `package` modules under `src` that `script` (and the modules `start`) import, transitively: the
    stdlib's modulefinder reads every import statement, lazy and relative ones too, and runs none."""
    finder = ModuleFinder(path=[str(src)])
    finder.run_script(str(script))
    for name in start:
        finder.import_hook(name)
    return {Path(module.__file__) for name, module in finder.modules.items()
            if name.split(".")[0] == package and module.__file__}


def loaded_modules(script: Path) -> dict[str, Path]:
    """{module name: file} of the raexmc modules a fresh interpreter loads importing `script`."""
    done = subprocess.run([sys.executable, "-c", PROBE, str(SRC), str(script)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    loaded = {name: Path(file).resolve() for name, file in json.loads(done.stdout.splitlines()[-1]).items()}
    outside = [str(f) for f in loaded.values() if not f.is_relative_to(SRC)]
    assert not outside, f"raexmc loaded from outside this checkout: {outside}"
    return loaded


def covered(path: str, deps: list[str]) -> bool:
    return any(path == dep.rstrip("/") or path.startswith(dep.rstrip("/") + "/") for dep in deps)


@pytest.mark.parametrize("name", list(stages()))
def test_stage_deps_cover_the_code_it_runs(name):
    stage = stages()[name]
    deps = [str(dep) for dep in stage.get("deps", [])]
    script = stage_script(stage)
    loaded = loaded_modules(script)
    assert loaded, f"importing {script.name} loaded no raexmc module: is the probe working?"
    runs = set(loaded.values()) | static_files(script, SRC, start=set(loaded))
    missing = sorted(path for path in (p.relative_to(REPO).as_posix()
                                       for p in runs | {script}) if not covered(path, deps))
    assert not missing, f"stage {name!r} runs {missing}, which its deps in dvc.yaml do not cover"


def test_static_scan_follows_lazy_and_relative_imports(tmp_path):
    """The scan sees imports inside functions, relative ones at any level, and not attributes."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "top.py").write_text("def f():\n    from .sub import deep\n")
    (pkg / "sub" / "deep.py").write_text("from ..leaf import value\n")
    (pkg / "leaf.py").write_text("value = 1\n")
    (pkg / "unused.py").write_text("")
    script = tmp_path / "script.py"
    script.write_text("import os\n\ndef main():\n    import pkg.top\n")
    found = {p.relative_to(tmp_path).as_posix() for p in static_files(script, tmp_path, "pkg")}
    assert found == {"pkg/__init__.py", "pkg/top.py", "pkg/sub/__init__.py", "pkg/sub/deep.py", "pkg/leaf.py"}
