"""The packaged model's requirements install on a CPU machine without CUDA, checked by pip itself against two
local indexes shaped like the public ones: PyPI, whose torch 2.13.0 (the CUDA build) pulls nvidia packages, and
PyTorch's CPU index, whose torch 2.13.0+cpu pulls none."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

from raexmc.pipeline.serving import CPU_TORCH_INDEX, pinned_requirements


def add_wheel(index: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    """A minimal pure-Python wheel of `name` `version` in `index`/<name>/, listed in that folder's index.html: the
    layout of a simple index (PEP 503), which pip reads from file:// as from https://."""
    dist = f"{name.replace('-', '_')}-{version}"
    (index / name).mkdir(parents=True, exist_ok=True)
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {requirement}\n" for requirement in requires)
    with zipfile.ZipFile(index / name / f"{dist}-py3-none-any.whl", "w") as wheel:
        wheel.writestr(f"{dist}.dist-info/METADATA", metadata)
        wheel.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                  "Tag: py3-none-any\n")
        wheel.writestr(f"{dist}.dist-info/RECORD", "")
    links = "".join(f'<a href="{path.name}">{path.name}</a>\n' for path in sorted((index / name).glob("*.whl")))
    (index / name / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")


def resolved(requirements: list[str], pypi: Path, cpu: Path, folder: Path) -> dict[str, str]:
    """What pip would install for the torch lines of `requirements` from the local indexes (PyPI's the main one,
    the CPU index where the requirements name it): {name: version}."""
    lines = [line.replace(CPU_TORCH_INDEX, cpu.as_uri()) for line in requirements
             if line.startswith("--") or line.startswith("torch==")]
    (folder / "requirements.txt").write_text("\n".join(lines) + "\n")
    report = folder / "report.json"
    subprocess.run([sys.executable, "-m", "pip", "install", "--isolated", "--dry-run", "--ignore-installed", "--quiet",
                    "--no-cache-dir", "--index-url", pypi.as_uri(), "-r", str(folder / "requirements.txt"),
                    "--report", str(report)], check=True, capture_output=True, text=True)
    return {item["metadata"]["name"]: item["metadata"]["version"] for item in json.loads(report.read_text())["install"]}


def test_a_model_built_on_a_cpu_torch_installs_the_cpu_build_with_no_nvidia_package(tmp_path):
    pypi, cpu = tmp_path / "pypi", tmp_path / "cpu"
    add_wheel(pypi, "torch", "2.13.0", ("nvidia-cublas==1.0",))
    add_wheel(pypi, "nvidia-cublas", "1.0")
    add_wheel(cpu, "torch", "2.13.0+cpu")
    requirements = pinned_requirements("2.13.0+cpu")
    assert requirements[0] == f"--extra-index-url {CPU_TORCH_INDEX}" and "torch==2.13.0" in requirements
    assert resolved(requirements, pypi, cpu, tmp_path) == {"torch": "2.13.0+cpu"}
    # a model built on a CUDA torch keeps PyPI's build, nvidia packages and all: the index line is what differs
    assert resolved(pinned_requirements("2.13.0+cu128"), pypi, cpu, tmp_path) == {"torch": "2.13.0",
                                                                                 "nvidia-cublas": "1.0"}
