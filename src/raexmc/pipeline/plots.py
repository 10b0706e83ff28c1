"""PNG figures of the evaluation sweeps, for MLflow (DVC renders its own from the JSON tables)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)


def line_plot(rows: list[dict[str, Any]], x: str, ys: list[str], title: str, target: str | os.PathLike,
              log_x: bool = False) -> Path:
    """One line per metric in `ys` against `x`."""
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
    figure.tight_layout()
    figure.savefig(target)
    plt.close(figure)
    return Path(target)


def segment_bars(rows: list[dict[str, Any]], target: str | os.PathLike) -> Path:
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
    figure.tight_layout()
    figure.savefig(target)
    plt.close(figure)
    return Path(target)
