"""What the evaluate stage writes: its evaluation folder (metrics, per-instance metrics, sweep rows and their plots)
and, where asked, each method's test-set scores."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ..evaluation.methods import segment_rows
from ..evaluation.model_search import per_instance_arrays
from ..evaluation.selection_file import Selection
from ..io import atomic_dir, write_json
from .plots import line_plot, segment_bars

LOGGED = ("metrics.json", "per_instance.npz", "lambda_sweep.png", "b_sweep.png", "segments_f1.png",
          "lambda_selection.png")
"""The files of the folder that the stage also logs to MLflow as artifacts."""


def write_evaluation(out: str | os.PathLike, metrics: dict[str, Any], result: dict[str, Any],
                     selection: Selection) -> None:
    """Write the folder `out` whole or not at all: metrics.json, per_instance.npz, the λ and b sweeps, macro-F1
    by segment and the validation and test curves (`selection`), as rows (.json, for `dvc plots`) and plots (.png)."""
    with atomic_dir(out) as folder:
        write_json(folder / "metrics.json", metrics)
        np.savez_compressed(folder / "per_instance.npz", **per_instance_arrays(result["per_instance"]))
        segments, chosen_rows = segment_rows(result["methods"]), selection.lambda_rows(result["lambda_sweep"])
        for name, rows in (("lambda_sweep", result["lambda_sweep"]), ("b_sweep", result["b_sweep"]),
                           ("segments_f1", segments), ("lambda_selection", chosen_rows)):
            write_json(folder / f"{name}.json", rows)
        line_plot(result["lambda_sweep"], "lambda", ["P@1", "P@5", "R@100"], "metric vs λ",
                  folder / "lambda_sweep.png", log_x=True)
        line_plot(result["b_sweep"], "b", ["P@1", "P@5", "R@100", "train_key_share"], "metric vs b",
                  folder / "b_sweep.png")
        segment_bars(segments, folder / "segments_f1.png")
        line_plot(chosen_rows, "lambda", ["validation", "test"],
                  f"{selection.metric} vs λ at τ={selection.tau}", folder / "lambda_selection.png", log_x=True)


def write_scores(out: str | os.PathLike, scores: dict[str, Any]) -> None:
    """Each method's test-set scores as the score file <method>.npz in the folder `out` (whole or not at all)."""
    from ..evaluation.score_file import save_scores  # only an evaluate run asked for scores loads it

    with atomic_dir(out) as folder:
        for method, matrix in scores.items():
            save_scores(Path(folder) / f"{method}.npz", matrix)
