"""Which MLflow run a stage logs into: one per pipeline execution, keyed by params, git commit and DVC experiment."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path
from typing import Any

PIPELINE_TAG = "raexmc.pipeline_key"
UNCOMMITTED = "uncommitted"  # the commit of a folder outside git


def git_commit(folder: Path) -> str:
    """HEAD of `folder`: for an experiment, pass its own copy (the code it runs), not the parent
    project, whose HEAD may move while the experiment runs."""
    proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else UNCOMMITTED


def experiment_name() -> str:
    """The DVC experiment being run, or "workspace" for a plain `dvc repro`."""
    return os.environ.get("DVC_EXP_NAME") or "workspace"


def pipeline_key(params: bytes, commit: str, exp_name: str) -> str:
    """The run's key: the params file's bytes, the commit and the experiment."""
    digest = hashlib.sha256(params)
    digest.update(f"\0{commit}\0{exp_name}".encode())
    return digest.hexdigest()[:16]


def pipeline_params(params_path: Path) -> dict[str, Any]:
    """Every param of the execution, the chosen dataset's entry included, so that runs in which
    DVC reran only the last stages still compare side by side on all of them."""
    from ...settings import read_params_tree

    tree = read_params_tree(params_path)
    chosen = tree.get("data", {}).get("name")
    picked = {key: value for key, value in tree.items() if key not in ("datasets", "presets")}
    if chosen in tree.get("datasets", {}):
        picked[f"datasets.{chosen}"] = tree["datasets"][chosen]
    return picked
