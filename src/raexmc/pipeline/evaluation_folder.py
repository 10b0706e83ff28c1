"""What the evaluate stage writes: its evaluation folder (metrics, per-instance metrics, sweep rows, and their
plots as PNGs for MLflow: DVC renders its own from the rows) and, where asked, each method's test-set scores."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np

from ..evaluation.methods import segment_rows
from ..evaluation.model_search import per_instance_arrays
from ..evaluation.selection_file import Selection
from ..io import atomic_dir, atomic_file, write_json

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

LOGGED = ("metrics.json", "per_instance.npz", "lambda_sweep.png", "b_sweep.png", "segments_f1.png",
          "lambda_selection.png")  # the files the stage also logs to MLflow


def write_evaluation(out: str | os.PathLike, metrics: dict[str, Any], result: dict[str, Any],
                     selection: Selection) -> None:
    """Write the folder `out` whole or not at all: metrics, per-instance metrics, and the sweeps, segments and
    selection curves as rows (.json, for `dvc plots`) and plots (.png)."""
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
    """Each method's test-set scores as <method>.npz in the folder `out`, or RAE's alone where `out` ends .npz."""
    from ..evaluation.score_file import save_scores  # only an evaluate run asked for scores loads it

    if Path(out).suffix == ".npz":
        with atomic_file(out, "wb") as handle:
            save_scores(handle, scores["rae"])
        return
    with atomic_dir(out) as folder:
        for method, matrix in scores.items():
            save_scores(Path(folder) / f"{method}.npz", matrix)


def line_plot(rows: list[dict[str, Any]], x: str, ys: list[str], title: str, target: str | os.PathLike,
              log_x: bool = False) -> None:
    figure, axes = plt.subplots(figsize=(5, 3.5), dpi=120)
    for y in ys:
        axes.plot([r[x] for r in rows], [r[y] for r in rows], marker="o", label=y)
    if log_x:
        axes.set_xscale("symlog", linthresh=0.01)
    axes.set_xlabel(x)
    axes.set_ylabel("%")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend()
    _save(figure, target)


def segment_bars(rows: list[dict[str, Any]], target: str | os.PathLike) -> None:
    """Macro-F1@5 per label segment, one bar group per segment, one bar per method."""
    methods = list(dict.fromkeys(r["method"] for r in rows))
    segments = list(dict.fromkeys(r["segment"] for r in rows))
    figure, axes = plt.subplots(figsize=(6, 3.5), dpi=120)
    width = 0.8 / max(len(methods), 1)
    for i, method in enumerate(methods):
        values = {r["segment"]: r["F1"] for r in rows if r["method"] == method}
        axes.bar([s + i * width for s in range(len(segments))], [values.get(s) or 0.0 for s in segments],
                 width=width, label=method)
    axes.set_xticks([s + 0.4 - width / 2 for s in range(len(segments))], segments)
    axes.set_ylabel("macro-F1@5 (%)")
    axes.legend()
    _save(figure, target)


def _save(figure, target: str | os.PathLike) -> None:
    figure.tight_layout()
    figure.savefig(target)
    plt.close(figure)
