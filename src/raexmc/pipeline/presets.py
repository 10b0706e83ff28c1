"""The paper's settings for its benchmarks (presets.yaml, which no stage reads): the `dvc exp run` command that
applies one, and what that run needs that this machine lacks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..data.catalogue import catalogue_dir
from ..encoder.model import weights_on_disk
from ..errors import ConfigError
from ..settings import read_mapping
from .tracking.run import flatten

PRESETS_FILE = "presets.yaml"

PAPER_GPUS = 8  # the paper trained on 8 A100s; a preset's train.batch_size is per GPU
WIDTH = 100     # the printed command wraps (with shell line continuations) to fit a terminal


def presets_path(params_path: str | os.PathLike) -> Path:
    return Path(params_path).parent / PRESETS_FILE


def preset_values(path: Path, name: str) -> dict[str, Any]:
    """Preset `name` as dotted keys and values, or a ConfigError naming the presets known."""
    presets = read_mapping(path, "presets file")
    if name not in presets:
        raise ConfigError(f"unknown preset '{name}' (known: {', '.join(presets)})", path)
    if not isinstance(presets[name], dict):
        raise ConfigError(f"a preset must be a mapping of settings (key: value), got {type(presets[name]).__name__}",
                          path, name)
    return flatten(presets[name])


def command(values: dict[str, Any]) -> str:
    lines, line = [], "dvc exp run"
    for setting in (f"-S '{key}={value}'" for key, value in values.items()):
        if len(line) + 1 + len(setting) > WIDTH - 2:
            lines.append(line)
            line = " "
        line += " " + setting
    return " \\\n".join([*lines, line])


def batch_note(values: dict[str, Any]) -> str:
    """The paper's global batch, and the settings that keep it on other hardware."""
    per_gpu, nproc = values.get("train.batch_size"), values.get("train.nproc")
    if per_gpu is None or nproc is None:
        return ""
    total = per_gpu * nproc
    return (f"the paper: {PAPER_GPUS} GPUs x {per_gpu} inputs = global batch {total:,}; "
            f"on G GPUs: train.nproc=G train.batch_size={total}/G")


def on_gpus(values: dict[str, Any], gpus: int, path: Path, name: str) -> dict[str, Any]:
    """The preset on `gpus` GPUs with the paper's global batch (gradient caching fits each GPU's part)."""
    per_gpu, nproc = values.get("train.batch_size"), values.get("train.nproc")
    if per_gpu is None or nproc is None:
        raise ConfigError("--gpus needs a preset that trains (train.nproc and train.batch_size)", path, name)
    total = per_gpu * nproc
    if gpus < 1 or total % gpus:
        raise ConfigError(f"--gpus must be a whole number >= 1 that divides the global batch {total:,}, got {gpus}",
                          path, name)
    return {**values, "train.nproc": gpus, "train.batch_size": total // gpus}


def missing(values: dict[str, Any], params_path: Path, data_dir: Path) -> list[str]:
    """What a run of the preset lacks here: the encoder's weights (on disk, never the network), the dataset."""
    needs = []
    encoder = values.get("encoder.name")
    if encoder is not None and not weights_on_disk(str(encoder)):
        needs.append(f"{encoder}'s weights (no local folder, not in the Hugging Face cache)")
    dataset = values.get("data.name")
    if dataset is not None and not (data_dir / str(dataset) / "stats.json").is_file():
        entry = catalogue_dir(params_path) / f"{dataset}.yaml"
        spec = read_mapping(entry, "dataset entry") if entry.is_file() else {}
        no_archive = spec.get("source") == "xc-repo" and not spec.get("archive_id")
        needs.append(f"{data_dir / str(dataset)} (not downloaded{'; set its archive_id' if no_archive else ''})")
    return needs
