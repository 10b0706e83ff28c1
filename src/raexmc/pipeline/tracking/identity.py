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
    """Every param of the execution, the chosen dataset's catalogue entry included (as `datasets.<name>`), so
    that runs in which DVC reran only the last stages still compare side by side on all of them."""
    from ...data.catalogue import catalogue_dir
    from ...params import load_params, read_mapping

    picked = load_params(params_path).data
    chosen = picked.get("data", {}).get("name")
    entry = catalogue_dir(params_path) / f"{chosen}.yaml"
    if isinstance(chosen, str) and entry.is_file():
        picked[f"datasets.{chosen}"] = read_mapping(entry, "dataset entry")
    return picked
