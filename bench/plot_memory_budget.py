"""The README's memory-budget plot: RAE's P@1 against its memory's bytes, one line per selection method
and compression, a panel per mode (zero-shot, fine-tuned), from a bench/memory_budget.py result.

    python bench/plot_memory_budget.py bench/results/memory_budget_foldoc.json   # writes the .png beside it
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import matplotlib
import matplotlib.ticker
import typer

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)


def draw(axes, rows: list[dict]) -> None:
    """One mode's lines on `axes`, with the full memory's P@1 and ¼ and ⅛ of its bytes as guides."""
    full = next(r for r in rows if r["method"] == "full" and r["compression"] == "none")
    lines: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    selected = {(row["method"], row["compression"]) for row in rows if row["method"] != "full"}
    for row in rows:  # the full memory (keep 1) is the first point of every selection method's line
        methods = sorted(m for m, c in selected if c == row["compression"]) if row["method"] == "full" else [row["method"]]
        for method in methods:
            lines[method, row["compression"]].append((row["bytes"] / 1e6, row["P@1"]))
    for (method, compression), points in sorted(lines.items()):
        points.sort()
        style = "-" if method.startswith("kmeans") else "--"
        axes.plot(*zip(*points), style, marker="o", markersize=3, label=f"{method}, {compression}")
    axes.axhline(full["P@1"], color="grey", linewidth=0.8)
    axes.axvline(full["bytes"] / 4e6, color="grey", linewidth=0.8, linestyle=":")
    axes.axvline(full["bytes"] / 8e6, color="grey", linewidth=0.8, linestyle=":")
    axes.set_xscale("log")
    axes.xaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1, 2, 3, 5)))
    axes.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    axes.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axes.set_xlabel("memory bytes (MB, log): indexes + values as stored")
    axes.set_ylabel("RAE P@1 (%)")
    axes.set_title(f"{rows[0]['dataset']}, {rows[0]['mode']}", fontsize=9)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=6, ncol=2)


def main(result: Path = typer.Argument(..., help="A memory_budget_<dataset>.json.")) -> None:
    rows = json.loads(result.read_text())["rows"]
    modes = sorted({row["mode"] for row in rows}, reverse=True)  # zero-shot, then fine-tuned
    figure, panels = plt.subplots(1, len(modes), figsize=(6 * len(modes), 4), dpi=120, squeeze=False)
    for axes, mode in zip(panels[0], modes):
        draw(axes, [row for row in rows if row["mode"] == mode])
    figure.suptitle("RAE P@1 against the memory's bytes: full memory (grey line), ¼ and ⅛ of its bytes (dotted)",
                    fontsize=9)
    figure.tight_layout()
    figure.savefig(result.with_suffix(".png"))
    plt.close(figure)


if __name__ == "__main__":
    typer.run(main)
