"""No raexmc module imports from a layer above its own, with the layers as raexmc.LAYERS writes them, and no
modules import each other in a circle, within a layer too.

Every import statement counts, wherever it stands (inside functions, under TYPE_CHECKING): a lazy
import is a dependency too, so a circle cannot hide in a function. The package itself (`import raexmc`, whose
__init__ holds LAYERS and imports its public names only when a caller reads them) may be imported from anywhere.
"""

from __future__ import annotations

from pathlib import Path

from raexmc import LAYERS
from tests.test_dvc_deps import SRC, imported_names

Layers = tuple[tuple[str, ...], ...]


def layer_of(name: str, layers: Layers) -> int | None:
    """Index in `layers` of the layer holding the dotted module `name` (None: in no layer)."""
    part = name.split(".")[1]
    return next((depth for depth, members in enumerate(layers) if part in members), None)


def layering_errors(src: Path, package: str, layers: Layers) -> list[str]:
    """One line per module in no layer and per import that goes up the layers."""
    errors = []
    for module, path in module_files(src, package).items():
        if module == package:
            continue
        own = layer_of(module, layers)
        if own is None:
            errors.append(f"{module} is in no layer")
            continue
        for name in sorted(imported_names(path, module)):
            if not name.startswith(f"{package}."):
                continue
            target = layer_of(name, layers)
            if target is not None and target < own:
                errors.append(f"{module} ({', '.join(layers[own])}) imports {name} ({', '.join(layers[target])})")
    return errors


def module_files(src: Path, package: str) -> dict[str, Path]:
    """{dotted module name: file} of every module of `package` under `src` (a package by its __init__)."""
    modules = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def import_circles(src: Path, package: str) -> list[list[str]]:
    """The modules of `package` that import each other in a circle (through any import statement, wherever it
    stands), one sorted list per circle; the package itself counts as no module (see the docstring above)."""
    modules = module_files(src, package)
    imports = {module: {name for name in imported_names(path, module) if name in modules and name != package}
               for module, path in modules.items()}
    reaches = {}
    for start in modules:
        seen, pending = set(), list(imports[start])
        while pending:
            module = pending.pop()
            if module not in seen:
                seen.add(module)
                pending.extend(imports[module])
        reaches[start] = seen
    circles = {tuple(sorted(other for other in reaches[module] if module in reaches[other]))
               for module in modules if module in reaches[module]}
    return sorted(list(circle) for circle in circles)


def test_no_modules_import_each_other_in_a_circle():
    assert not import_circles(SRC, "raexmc")


def write_package(root: Path, files: dict[str, str]) -> None:
    """A made-up package `pkg` under `root`: each file at its path in the package, with its text."""
    for name, text in files.items():
        (root / "pkg" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "pkg" / name).write_text(text)


def test_a_circle_is_caught_where_a_lazy_import_hides_it(tmp_path):
    """A circle closed by an import inside a function, and one of three modules in one folder, are each found;
    one module importing another both ways round without a circle (a -> b, c -> b) is not."""
    write_package(tmp_path, {
        "__init__.py": "", "sub/__init__.py": "",
        "model.py": "import pkg\n\ndef load():\n    from .folder import read\n",
        "folder.py": "from pkg.model import Model\n", "plain.py": "from . import model\n",
        "sub/a.py": "from .b import x\n", "sub/b.py": "from . import c\n",
        "sub/c.py": "def f():\n    from pkg.sub import a\n"})
    assert import_circles(tmp_path, "pkg") == [["pkg.folder", "pkg.model"], ["pkg.sub.a", "pkg.sub.b", "pkg.sub.c"]]


def test_no_module_imports_from_a_layer_above():
    assert not layering_errors(SRC, "raexmc", LAYERS)


def test_layers_name_every_package_and_module_once():
    members = [member for layer in LAYERS for member in layer]
    found = sorted(path.stem if path.is_file() else path.name for path in (SRC / "raexmc").iterdir()
                   if path.name != "__init__.py" and (path.suffix == ".py" or (path / "__init__.py").is_file()))
    assert sorted(members) == found


def test_an_upward_import_is_caught_wherever_it_stands(tmp_path):
    """A lazy upward import inside a function, one through a relative import, and a module no layer
    names are all reported; downward and same-layer imports are not."""
    write_package(tmp_path, {
        "__init__.py": "", "top/__init__.py": "", "low/__init__.py": "", "base.py": "", "stray.py": "",
        "top/a.py": "from ..low import b\nfrom pkg.base import x\nfrom . import c\n", "top/c.py": "",
        "low/b.py": "import pkg\n\ndef f():\n    from pkg.top.a import g\n", "low/d.py": "from ..top import c\n"})
    layers = (("top",), ("low",), ("base",))
    assert layering_errors(tmp_path, "pkg", layers) == [
        "pkg.low.b (low) imports pkg.top.a (top)",
        "pkg.low.b (low) imports pkg.top.a.g (top)",
        "pkg.low.d (low) imports pkg.top (top)",
        "pkg.low.d (low) imports pkg.top.c (top)",
        "pkg.stray is in no layer",
    ]
