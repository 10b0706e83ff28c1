"""Peak memory of the evaluate stage's setup (the values and the Evaluator over the test labels), without
graphs or queries: what the label matrices cost at a shape such as LF-AmazonTitles-1.3M's.

    PYTHONPATH=<checkout>/src python bench/evaluate_setup_memory.py data/synthetic-LF-AmazonTitles-1.3M

Prints VmRSS / VmHWM (MB) at the start, after the values and after the Evaluator. Run it with the src of
two commits to compare them: before training_values(copy=...) existed, the values were always a copy.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import typer

from raexmc.data.dataset import Dataset
from raexmc.evaluation.evaluator import Evaluator
from raexmc.memory.keys_values import training_values


def status_mb() -> dict[str, int]:
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return {key: int(fields[key].split()[0]) // 1024 for key in ("VmRSS", "VmHWM")}


def main(dataset: Path = typer.Argument(..., help="A download stage's folder.")) -> None:
    data = Dataset(dataset)
    start = status_mb()
    hand_over = {"copy": False} if "copy" in inspect.signature(training_values).parameters else {}
    values = training_values(data.label_matrix("train"), "binary", **hand_over)
    after_values = status_mb()
    Evaluator(values, data.label_matrix("test"), data.filter_matrix("test"), (0.6, 2.6))
    print(json.dumps({"start_mb": start, "after_values_mb": after_values, "after_evaluator_mb": status_mb()}))


if __name__ == "__main__":
    typer.run(main)
