"""The paper's settings for its benchmarks (params.yaml `presets`): the `dvc exp run` command that applies one,
and what that run needs that this machine lacks, so that a preset run as printed is the paper's run or says
why it cannot be."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..encoder.model import weights_on_disk
from ..errors import PARAMS_FILE, ConfigError
from .tracking.names import flatten

PAPER_GPUS = 8  # the paper trained on 8 A100s; a preset's train.batch_size is per GPU
WIDTH = 100     # the printed command wraps (with shell line continuations) to fit a terminal


def preset_values(presets: dict[str, Any], name: str) -> dict[str, Any]:
    """Preset `name` of the `presets` catalogue as dotted keys and values, or a ConfigError naming the presets
    known."""
    if name not in presets:
        raise ConfigError(f"unknown preset '{name}' (known: {', '.join(presets)})", PARAMS_FILE, "presets")
    if not isinstance(presets[name], dict):
        raise ConfigError(f"a preset must be a mapping of settings (key: value), got {type(presets[name]).__name__}",
                          PARAMS_FILE, f"presets.{name}")
    return flatten(presets[name])


def command(values: dict[str, Any]) -> str:
    """The `dvc exp run` command setting `values`, wrapped between settings with shell line continuations."""
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


def missing(values: dict[str, Any], catalogue: dict[str, Any], data_dir: Path) -> list[str]:
    """What a run of the preset needs that is not here: the encoder's weights (a local folder, or the
    Hugging Face cache: looked up on disk, never on the network) and the dataset under `data_dir`."""
    needs = []
    encoder = values.get("encoder.name")
    if encoder is not None and not weights_on_disk(str(encoder)):
        needs.append(f"{encoder}'s weights (no local folder, not in the Hugging Face cache)")
    dataset = values.get("data.name")
    if dataset is not None and not (data_dir / str(dataset) / "stats.json").is_file():
        spec = catalogue.get(dataset, {})
        no_archive = spec.get("source") == "xc-repo" and not spec.get("archive_id")
        needs.append(f"{data_dir / str(dataset)} (not downloaded{'; set its archive_id' if no_archive else ''})")
    return needs
