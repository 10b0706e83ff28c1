"""CPU seconds of each piece a stage process pays before its own work: the interpreter, the project's tracking code,
MLflow's import, opening an existing SQLite store and logging a stage into it, torch, and transformers' tokenizer.

    python bench/startup_costs.py [--repeats 5]

Each piece runs in a fresh interpreter, `repeats` times; the record keeps the median CPU seconds (user + system of
the child, which hardly change when other jobs share the cores, unlike wall time) of the piece's code minus that of
the pieces it builds on, so the rows add up to what a stage pays. The store is opened in a throwaway DVC-shaped
folder (a `.dvc/` folder and a params file), created by a first run that is not counted. Writes
bench/results/startup_costs.json with the command that reproduces it and the load average before and after.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import typer

from common import ROOT, rerun_command
from raexmc.io import write_json

TRACKED = ("from raexmc.pipeline.tracking.run import stage_run\n"
           "with stage_run('probe', 'params.yaml') as run:\n"
           "    run.params({'probe': 1})\n"
           "    run.metrics({'value': 1.0})\n")

# name: (code, the piece it builds on); each row is the code's CPU time less its base's
PIECES = {
    "interpreter": ("pass", None),
    "raexmc tracking code (no MLflow)": ("import raexmc.pipeline.tracking.stage", "interpreter"),
    "mlflow import": ("import raexmc.pipeline.tracking.stage\nimport mlflow.tracking",
                      "raexmc tracking code (no MLflow)"),
    "open the store and log one stage": ("import mlflow.tracking\n" + TRACKED, "mlflow import"),
    "torch import": ("import torch", "interpreter"),
    "transformers AutoTokenizer import (torch with it)": ("from transformers import AutoTokenizer", "interpreter"),
}


def cpu_seconds(code: str, folder: Path) -> float:
    """User + system seconds of a fresh interpreter running `code` in `folder`."""
    before = os.times()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "MLFLOW_TRACKING_URI": ""}
    subprocess.run([sys.executable, "-c", code], cwd=folder, env=env, check=True, capture_output=True)
    after = os.times()
    return after.children_user + after.children_system - before.children_user - before.children_system


def main(repeats: int = typer.Option(5, help="Runs of each piece; the median is kept."),
         out: Path = typer.Option(ROOT / "bench" / "results" / "startup_costs.json", help="Record to write.")) -> None:
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="raexmc-startup-") as scratch:
        folder = Path(scratch)
        (folder / ".dvc").mkdir()
        (folder / "params.yaml").write_text("probe: 1\n")
        cpu_seconds(TRACKED, folder)  # creates the store: later runs open one at MLflow's schema head
        medians = {name: statistics.median(cpu_seconds(code, folder) for _ in range(repeats))
                   for name, (code, _) in PIECES.items()}
    pieces = {name: round(medians[name] - (medians[base] if base else 0.0), 2) for name, (_, base) in PIECES.items()}
    record = {"what": "median CPU seconds of each piece a stage process pays before its own work "
                      "(each less the piece it builds on)",
              "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
              "load_average": {"before": round(load_before[0], 1), "after": round(os.getloadavg()[0], 1)},
              "repeats": repeats, "cpu_s": pieces, "command": rerun_command()}
    write_json(out, record)
    for name, value in pieces.items():
        print(f"{name}: {value} CPU s")


if __name__ == "__main__":
    typer.run(main)
