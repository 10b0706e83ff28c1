"""bench/evaluate_setup_memory.py on a small made-up dataset: the three readings, the peak never falling."""

from __future__ import annotations

import json
import subprocess
import sys

from test_memory_budget import small_project

from conftest import REPO


def test_prints_rss_and_peak_at_each_step(tmp_path):
    data, _, _ = small_project(tmp_path)
    proc = subprocess.run([sys.executable, str(REPO / "bench/evaluate_setup_memory.py"), str(data)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    steps = [report[name] for name in ("start_mb", "after_values_mb", "after_evaluator_mb")]
    assert all(set(step) == {"VmRSS", "VmHWM"} and 0 < step["VmRSS"] <= step["VmHWM"] for step in steps)
    assert steps[0]["VmHWM"] <= steps[1]["VmHWM"] <= steps[2]["VmHWM"]
