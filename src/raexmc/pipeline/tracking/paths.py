"""The project root that outlives one stage run: where the MLflow store lives, for experiments run in copies too;
and the folders of a working copy that stages write into."""

from __future__ import annotations

import os
from pathlib import Path


def project_root(start: str | os.PathLike | None = None) -> Path:
    """The DVC project that owns this run.

    `dvc exp run --temp` and queued experiments run in a copy under `.dvc/tmp/exps/`; DVC points
    DVC_ROOT at the parent project for them, so their MLflow runs land in the same store as
    workspace runs. Outside DVC the nearest folder holding `.dvc/` (or the start folder) is used.
    """
    if os.environ.get("DVC_ROOT"):
        return Path(os.environ["DVC_ROOT"]).resolve()
    here = Path(start or os.getcwd()).resolve()
    return working_copy(here) or here


def working_copy(start: str | os.PathLike) -> Path | None:
    """The nearest folder at or above `start` holding `.dvc/`: for an experiment run in a copy,
    the copy itself (not the parent project that DVC_ROOT names); None outside a DVC project."""
    here = Path(start).resolve()
    for folder in (here, *here.parents):
        if (folder / ".dvc").is_dir():
            return folder
    return None


OUTPUT_FOLDERS = ("data", "artifacts")  # where dvc.yaml's stages write: data/<dataset>, artifacts/<dataset>/...


def output_folders(params_path: str | os.PathLike) -> list[Path]:
    """The folders the pipeline's stages write their outputs into, in the working copy of `params_path`
    (none outside a DVC project: there a stage writes only where its options say)."""
    root = working_copy(Path(params_path).resolve().parent)
    return [] if root is None else [root / name for name in OUTPUT_FOLDERS]
