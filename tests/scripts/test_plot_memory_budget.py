"""scripts/plot_memory_budget.py: which points form which line, on hand-made rows, and a real PNG."""

from __future__ import annotations

import json

from tests.helpers import REPO, load_module

plot = load_module(REPO / "scripts/plot_memory_budget.py")


def row(method, keep, compression, megabytes, p1, mode="zero-shot"):
    return {"dataset": "tiny", "mode": mode, "method": method, "keep": keep, "compression": compression,
            "bytes": megabytes * 1e6, "P@1": p1, "P@5": 0.0, "R@100": 0.0, "latency_ms": 1.0}


ROWS = [row("full", 1.0, "none", 40, 50.0), row("full", 1.0, "sq4-m6", 5, 49.0), row("full", 1.0, "sq4-m5", 4, 49.5),
        row("random", 0.5, "none", 30, 45.0), row("kmeans", 0.5, "none", 30, 48.0),
        row("kmeans", 0.5, "sq4-m6", 3, 47.0), row("random", 0.0, "none", 20, 40.0)]


def test_the_full_memory_starts_every_line_of_its_compression_or_stands_alone_and_both_modes_are_plotted(
        tmp_path):
    assert plot.line_points(ROWS) == {
        ("kmeans", "none"): [(30.0, 48.0), (40.0, 50.0)],
        ("random", "none"): [(20.0, 40.0), (30.0, 45.0), (40.0, 50.0)],
        ("kmeans", "sq4-m6"): [(3.0, 47.0), (5.0, 49.0)],
        ("full", "sq4-m5"): [(4.0, 49.5)],
    }
    result = tmp_path / "memory_budget_tiny.json"
    fine_tuned = [{**r, "mode": "fine-tuned", "P@1": r["P@1"] + 20} for r in ROWS]
    result.write_text(json.dumps({"rows": ROWS + fine_tuned, "command": {}}))
    plot.main(result)
    assert result.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
