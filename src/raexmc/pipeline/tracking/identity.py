"""Where and as what a stage runs: the project root that holds the MLflow store (for experiments run in copies
too), the working copy it writes into, and the MLflow run it logs into, keyed by params, git commit and DVC
experiment: one per pipeline execution."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path
from typing import Any

PIPELINE_TAG = "raexmc.pipeline_key"
UNCOMMITTED = "uncommitted"  # the commit of a folder outside git
OUTPUT_FOLDERS = ("data", "artifacts")  # where dvc.yaml's stages write: data/<dataset>, artifacts/<dataset>/...


def project_root() -> Path:
    """The project owning this run: DVC_ROOT in an experiment's copy, else the working copy (or the current folder)."""
    if os.environ.get("DVC_ROOT"):
        return Path(os.environ["DVC_ROOT"]).resolve()
    return working_copy(Path.cwd()) or Path.cwd().resolve()


def working_copy(start: str | os.PathLike) -> Path | None:
    here = Path(start).resolve()
    return next((folder for folder in (here, *here.parents) if (folder / ".dvc").is_dir()), None)


def output_folders(params_path: str | os.PathLike) -> list[Path]:
    root = working_copy(Path(params_path).resolve().parent)
    return [] if root is None else [root / name for name in OUTPUT_FOLDERS]


def git_commit(folder: Path) -> str:
    """HEAD of `folder`: for an experiment, its own copy (the code it runs), not the parent project's moving HEAD."""
    proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else UNCOMMITTED


def experiment_name() -> str:
    return os.environ.get("DVC_EXP_NAME") or "workspace"


def pipeline_key(params_path: Path, params: bytes, commit: str, exp_name: str) -> str:
    """The run's key: the params file's bytes, the chosen dataset's entry file's, the commit and the experiment."""
    digest = hashlib.sha256(params)
    entry = dataset_entry(params_path)
    if entry is not None:
        digest.update(b"\0" + entry.read_bytes())
    digest.update(f"\0{commit}\0{exp_name}".encode())
    return digest.hexdigest()[:16]


def run_identity(params_path: Path, params: bytes) -> tuple[str, dict[str, str], str]:
    commit, exp_name = git_commit(Path.cwd()), experiment_name()
    key = pipeline_key(params_path, params, commit, exp_name)
    tags = {PIPELINE_TAG: key, "dvc_experiment": exp_name}
    if commit != UNCOMMITTED:  # under MLflow's own key, which its UI shows as the run's source version
        tags["mlflow.source.git.commit"] = commit
    return key, tags, exp_name if exp_name != "workspace" else f"workspace-{key[:8]}"


def pipeline_params(params_path: Path) -> dict[str, Any]:
    """Every param of the execution, the chosen dataset's entry as `datasets.<name>` (so that runs where DVC reran
    only the last stages compare on all of them)."""
    from ...settings import read_mapping, read_params_tree

    picked = read_params_tree(params_path)
    entry = dataset_entry(params_path)
    if entry is not None:
        picked[f"datasets.{entry.stem}"] = read_mapping(entry, "dataset entry")
    return picked


def dataset_entry(params_path: Path) -> Path | None:
    """datasets/<data.name>.yaml beside the params file; None where any of them is missing."""
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
