"""scripts/memory_targets.py: issue 20's three targets, checked on hand-made rows whose verdicts are worked out
below."""

from __future__ import annotations

from tests.helpers import REPO, load_module

targets = load_module(REPO / "scripts/memory_targets.py")


def row(method, keep, compression, bytes_, p1, latency=1.0, mode="zero-shot"):
    return {"dataset": "tiny", "mode": mode, "method": method, "keep": keep, "compression": compression,
            "bytes": bytes_, "P@1": p1, "P@5": 0.0, "R@100": 0.0, "latency_ms": latency}


FULL = row("full", 1.0, "none", 1000, 50.0)


def verdicts(rows):
    return {r["target"]: r for r in targets.checks(rows)}


def test_each_target_met_and_missed_by_hand_and_modes_checked_apart():
    rows = [FULL,
            row("full", 1.0, "sq8", 250, 49.95, latency=0.8),       # 1/4 of the bytes, -0.05, faster: quarter met
            row("kmeans", 0.5, "sq8", 200, 50.5, latency=1.2),      # better P@1 but slower: not the quarter's pick
            row("kmeans", 0.5, "sq4", 126, 50.9, latency=1.1),      # just over 1/8, slower
            row("kmeans", 0.25, "sq4", 125, 49.4),                  # at 1/8 but -0.6: eighth missed
            row("kmeans", 0.1, "none", 700, 49.1),                  # -0.9, and 5.1 over random: selection met
            row("random", 0.1, "none", 700, 44.0)]
    found = verdicts(rows)
    assert found["quarter"]["met"] and found["quarter"]["best"] == "keep 1 full sq8"
    assert found["quarter"]["delta_P@1"] == -0.05 and found["quarter"]["latency_ratio"] == 0.8
    assert not found["eighth"]["met"] and found["eighth"]["best"] == "keep 0.25 kmeans sq4"
    assert found["eighth"]["delta_P@1"] == -0.6 and found["eighth"]["of_full"] == 0.125
    assert found["selection"]["met"] and found["selection"]["over_random"] == 5.1
    # selection needs both margins, and the modes are checked apart
    close_to_random = [FULL, row("kmeans", 0.1, "none", 700, 49.5), row("random", 0.1, "none", 700, 45.0)]
    assert not verdicts(close_to_random)["selection"]["met"], "4.5 over random is under 5"
    fine_tuned = [row(r["method"], r["keep"], r["compression"], r["bytes"], r["P@1"] + 10, mode="fine-tuned")
                  for r in close_to_random]
    results = targets.checks(close_to_random + fine_tuned)
    assert [(r["mode"], r["target"]) for r in results] == [(m, t) for m in ("zero-shot", "fine-tuned")
                                                           for t in ("quarter", "eighth", "selection")]
    assert {r["full_P@1"] for r in results} == {50.0, 60.0}
    assert not any(r["met"] for r in results if r["target"] != "selection")  # nothing within 1/4 of the bytes
