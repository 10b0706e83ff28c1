"""The memory-budget targets, checked on bench/memory_budget.py's results: for each dataset and mode, the best
memory within each byte budget and whether it meets its target.

    python scripts/memory_targets.py bench/results/memory_budget_foldoc.json bench/results/memory_budget_wordnet.json

Targets (the full memory: keep 1, no compression, float32 hnswlib M=64):
- quarter: at <= 1/4 of its bytes, P@1 >= full - 0.1 and latency no worse than full's;
- eighth:  at <= 1/8 of its bytes, P@1 >= full - 0.5;
- selection: uncompressed, keep <= 0.1 (above 0), P@1 >= full - 1.0 and >= random's at the same keep + 5.
"Best" is the row within the budget that meets its target with the highest P@1, or the highest P@1 when
none meets it (for selection: among the methods other than random). Prints a markdown table; writes it to
bench/results/memory_targets.md with --out.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

BUDGETS = {"quarter": (0.25, 0.1), "eighth": (0.125, 0.5)}   # target: (share of full bytes, allowed P@1 loss)
SELECTION_KEEP, SELECTION_LOSS, OVER_RANDOM = 0.1, 1.0, 5.0


def describe(row: dict) -> str:
    return f"keep {row['keep']:g} {row['method']} {row['compression']}"


def budget_check(rows: list[dict], full: dict, target: str) -> dict:
    share, loss = BUDGETS[target]
    within = [r for r in rows if r["bytes"] <= share * full["bytes"]]

    def meets(r: dict) -> bool:
        fast = target != "quarter" or r["latency_ms"] <= full["latency_ms"]
        return r["P@1"] >= full["P@1"] - loss and fast

    if not within:
        return {"target": target, "best": None, "met": False}
    best = max(within, key=lambda r: (meets(r), r["P@1"], -r["bytes"]))
    return {"target": target, "best": describe(best), "of_full": round(best["bytes"] / full["bytes"], 3),
            "delta_P@1": round(best["P@1"] - full["P@1"], 2),
            "latency_ratio": round(best["latency_ms"] / full["latency_ms"], 2), "met": meets(best)}


def selection_check(rows: list[dict], full: dict) -> dict:
    chosen = [r for r in rows if r["compression"] == "none" and 0 < r["keep"] <= SELECTION_KEEP
              and r["method"] not in ("full", "random")]
    if not chosen:
        return {"target": "selection", "best": None, "met": False}
    best = max(chosen, key=lambda r: (r["P@1"], -r["keep"]))
    random = next((r for r in rows if r["method"] == "random" and r["keep"] == best["keep"]
                   and r["compression"] == "none"), None)
    over_random = None if random is None else round(best["P@1"] - random["P@1"], 2)
    met = best["P@1"] >= full["P@1"] - SELECTION_LOSS and over_random is not None and over_random >= OVER_RANDOM
    return {"target": "selection", "best": describe(best), "of_full": round(best["bytes"] / full["bytes"], 3),
            "delta_P@1": round(best["P@1"] - full["P@1"], 2), "over_random": over_random, "met": met}


def checks(rows: list[dict]) -> list[dict]:
    """Every target of every (dataset, mode) in `rows`."""
    results = []
    for dataset, mode in dict.fromkeys((r["dataset"], r["mode"]) for r in rows):
        group = [r for r in rows if (r["dataset"], r["mode"]) == (dataset, mode)]
        full = next(r for r in group if r["method"] == "full" and r["compression"] == "none")
        for check in (budget_check(group, full, "quarter"), budget_check(group, full, "eighth"),
                      selection_check(group, full)):
            results.append({"dataset": dataset, "mode": mode, "full_P@1": full["P@1"], **check})
    return results


def markdown(results: list[dict]) -> str:
    lines = ["| dataset | mode | target | best memory | of full bytes | ΔP@1 | over random | latency / full | met |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        cells = [r["dataset"], r["mode"], r["target"], r["best"] or "none within budget", r.get("of_full", ""),
                 r.get("delta_P@1", ""), r.get("over_random", ""), r.get("latency_ratio", ""),
                 "yes" if r["met"] else "**no**"]
        lines.append("| " + " | ".join("" if c is None else str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def main(results: list[Path] = typer.Argument(..., help="memory_budget_<dataset>.json files."),
         out: Path = typer.Option(None,
                                  help="Also write the table here (e.g. bench/results/memory_targets.md).")) -> None:
    rows = [row for path in results for row in json.loads(path.read_text())["rows"]]
    table = markdown(checks(rows))
    typer.echo(table, nl=False)
    if out is not None:
        out.write_text(table)


if __name__ == "__main__":
    typer.run(main)
