"""The packaged model's requirements install on a CPU machine without CUDA, checked by pip itself against two
local indexes shaped like the public ones: PyPI, whose torch 2.13.0 (the CUDA build) pulls nvidia packages, and
PyTorch's CPU index, whose torch 2.13.0+cpu pulls none."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from raexmc.pipeline.serving import CPU_TORCH_INDEX, pinned_requirements
from tests.helpers import add_wheel


def pip_installs(args: list[str], folder: Path) -> dict[str, str]:
    """What `pip install args` would install, by pip's own dry run: {name: version}."""
    report = folder / "report.json"
    subprocess.run([sys.executable, "-m", "pip", "install", "--isolated", "--dry-run", "--ignore-installed", "--quiet",
                    "--no-cache-dir", *args, "--report", str(report)], check=True, capture_output=True, text=True)
    return {item["metadata"]["name"]: item["metadata"]["version"] for item in json.loads(report.read_text())["install"]}


def resolved(requirements: list[str], pypi: Path, cpu: Path, folder: Path) -> dict[str, str]:
    """What pip would install for the torch lines of `requirements` from the local indexes (PyPI's the main one,
    the CPU index where the requirements name it)."""
    lines = [line.replace(CPU_TORCH_INDEX, cpu.as_uri()) for line in requirements
             if line.startswith("--") or line.startswith("torch==")]
    (folder / "requirements.txt").write_text("\n".join(lines) + "\n")
    return pip_installs(["--index-url", pypi.as_uri(), "-r", str(folder / "requirements.txt")], folder)


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
