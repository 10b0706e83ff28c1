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


def pipeline_key(params_path: Path, params: bytes, commit: str, exp_name: str) -> str:
    """The run's key: the params file's bytes `params`, the chosen dataset's entry (its file's bytes: the catalogue
    is no part of the params file), the commit and the experiment."""
    digest = hashlib.sha256(params)
    entry = dataset_entry(params_path)
    if entry is not None:
        digest.update(b"\0" + entry.read_bytes())
    digest.update(f"\0{commit}\0{exp_name}".encode())
    return digest.hexdigest()[:16]


def pipeline_params(params_path: Path) -> dict[str, Any]:
    """Every param of the execution, the chosen dataset's catalogue entry included (as `datasets.<name>`), so
    that runs in which DVC reran only the last stages still compare side by side on all of them."""
    from ...settings import read_mapping, read_params_tree

    picked = read_params_tree(params_path)
    entry = dataset_entry(params_path)
    if entry is not None:
        picked[f"datasets.{entry.stem}"] = read_mapping(entry, "dataset entry")
    return picked


def dataset_entry(params_path: Path) -> Path | None:
    """The chosen dataset's catalogue file (datasets/<data.name>.yaml beside the params file); None where the params
    file, its data.name or that file is missing (the stage that needs it says so)."""
    from ...data.catalogue import catalogue_dir
    from ...errors import ConfigError
    from ...settings import read_mapping

    try:
        data = read_mapping(params_path, "params file").get("data")
    except ConfigError:
        return None
    chosen = data.get("name") if isinstance(data, dict) else None
    entry = catalogue_dir(params_path) / f"{chosen}.yaml"
    return entry if isinstance(chosen, str) and entry.is_file() else None
