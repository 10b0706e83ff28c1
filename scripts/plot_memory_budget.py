"""The memory-budget plot of docs/memory.md: RAE's P@1 against its memory's bytes, one line per selection method
and compression, a panel per mode (zero-shot, fine-tuned), from a bench/memory_budget.py result.

    python scripts/plot_memory_budget.py bench/results/memory_budget_foldoc.json   # writes the .png beside it
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


def line_points(rows: list[dict]) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """One mode's (MB, P@1) points per (method, compression), each line sorted by bytes. The full memory
    (keep 1) is the first point of every selection method's line, or a line of its own (drawn as a star)
    at a compression no selection was measured with."""
    lines: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    selected = {(row["method"], row["compression"]) for row in rows if row["method"] != "full"}
    for row in rows:
        methods = (sorted(m for m, c in selected if c == row["compression"]) if row["method"] == "full"
                   else [row["method"]])
        for method in methods or ["full"]:
            lines[method, row["compression"]].append((row["bytes"] / 1e6, row["P@1"]))
    return {key: sorted(points) for key, points in lines.items()}


def draw(axes, rows: list[dict], colors: dict[tuple[str, str], tuple]) -> None:
    """One mode's lines on `axes`, with the full memory's P@1 and ¼ and ⅛ of its bytes as guides."""
    full = next(r for r in rows if r["method"] == "full" and r["compression"] == "none")
    for (method, compression), points in sorted(line_points(rows).items()):
        style = "-" if method.startswith("kmeans") else "--"
        alone = method == "full"
        axes.plot(*zip(*points), style, marker="*" if alone else "o", markersize=8 if alone else 3,
                  color=colors[method, compression], label=f"{method}, {compression}")
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
    by_mode = {mode: [row for row in rows if row["mode"] == mode] for mode in modes}
    keys = sorted({key for mode in modes for key in line_points(by_mode[mode])})
    colors = {key: plt.cm.tab20(i % 20) for i, key in enumerate(keys)}  # a line keeps its colour in every panel
    for axes, mode in zip(panels[0], modes):
        draw(axes, by_mode[mode], colors)
    figure.suptitle("RAE P@1 against the memory's bytes: full memory (grey line), ¼ and ⅛ of its bytes (dotted)",
                    fontsize=9)
    figure.tight_layout()
    figure.savefig(result.with_suffix(".png"))
    plt.close(figure)


if __name__ == "__main__":
    typer.run(main)
