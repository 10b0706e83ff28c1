"""What the benchmarks share: the command that reruns one, appending a measured row to its record, RAE's test
metrics on given hits, the speed benchmarks' encoders and synthetic token caches, and how a record names its
device. A benchmark runs as `python bench/<name>.py`, which puts bench/ on the import path: `from common import
...` finds this file. torch is imported where it is used, so the benchmarks that never touch an encoder load
without it."""

from __future__ import annotations

import json
import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Any

import numpy as np

from raexmc.data.dataset import Dataset
from raexmc.encoder.tokens import TokenCache
from raexmc.evaluation.evaluator import Evaluator
from raexmc.evaluation.methods import rae_scorer
from raexmc.evaluation.propensity import table_propensity
from raexmc.io import write_json
from raexmc.memory.keys_values import training_values
from raexmc.rae.model import RaeModel, RaeSettings

ROOT = Path(__file__).resolve().parents[1]


KERNEL_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile")  # what the CPU's kernels can use


def machine() -> dict[str, Any]:
    """The CPU's name, count and vector extensions, and the load averages at the time (other jobs share the
    cores)."""
    lines = Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").is_file() else []
    name = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")),
                platform.processor())
    flags = next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), [])
    return {"cpu": name, "cpus": os.cpu_count(), "cpu_flags": [flag for flag in KERNEL_FLAGS if flag in flags],
            "load_average": [round(load, 2) for load in os.getloadavg()]}


def rerun_command(arguments: list[str] | None = None) -> str:
    """The command line that reruns this benchmark from the repository root (with `arguments`, those instead)."""
    return "python " + shlex.join([f"bench/{Path(sys.argv[0]).name}", *(sys.argv[1:] if arguments is None
                                                                         else arguments)])


def append_row(out: Path, row: dict) -> None:
    """Add `row` to the JSON list in `out` (one row a measurement), and print it."""
    recorded = json.loads(out.read_text()) if out.is_file() else []
    write_json(out, [*recorded, row])
    print(json.dumps(row), flush=True)


def evaluator_of(dataset: Dataset) -> Evaluator:
    """The evaluate stage's scoring of `dataset`'s test split, the training inputs' keys carrying binary values."""
    return Evaluator(training_values(dataset.label_matrix("train")), dataset.label_matrix("test"),
                     dataset.filter_matrix("test"), table_propensity(dataset.names).ab)


def rae_summary(evaluator: Evaluator, hits: tuple[np.ndarray, np.ndarray], lam: float, tau: float,
                b: int) -> dict[str, float]:
    """RAE's P@1, P@5 and R@100 (percent) at λ, τ and b on the joint top-b `hits` of every test query."""
    rae = RaeModel(evaluator.Y_train, RaeSettings(lam, tau, b))
    summary = evaluator.summary(evaluator.rank(len(hits[0]), rae_scorer(rae, hits)))[0]
    return {metric: summary[metric] for metric in ("P@1", "P@5", "R@100")}


def build_model(name: str, device: str):
    """The named encoder in training mode, or DistilBERT's default architecture built offline (mean pooling)."""
    from raexmc.encoder.sentence import load_encoder

    if name != "distilbert-sized":
        return load_encoder(name, device).train()
    from transformers import DistilBertConfig, DistilBertModel

    from raexmc.encoder.layout import Pooling
    from raexmc.encoder.sentence import SentenceEncoder

    return SentenceEncoder(DistilBertModel(DistilBertConfig()), Pooling("mean")).to(device).train()


def device_name(device: str) -> str:
    """What a record says ran it: the GPU's name, or the CPU and its thread count."""
    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def synthetic_token_cache(folder: Path, splits: dict[str, tuple[int, int, int]], vocab: int,
                          rng: np.random.Generator) -> TokenCache:
    """A token cache of random ids: per split, (texts, shortest, longest) tokens, the lengths uniform between the
    two (every text at full length where they are equal)."""
    for split, (count, shortest, width) in splits.items():
        np.save(folder / f"{split}.ids.npy", rng.integers(1000, vocab, size=(count, width), dtype=np.int32))
        lengths = (np.full(count, width, np.int32) if shortest == width
                   else rng.integers(shortest, width + 1, size=count, dtype=np.int32))
        np.save(folder / f"{split}.len.npy", lengths)
    write_json(folder / "meta.json", {"key": {"synthetic": True}})
    return TokenCache(folder)
