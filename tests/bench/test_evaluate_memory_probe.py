"""bench/evaluate_memory_probe.py on a small made-up project: every reading present, scoring over the asked
queries, and the resident memory growing as the setup loads each part."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from raexmc.memory.input_memory import MemorySettings, build_input_memory
from test_memory_budget import small_project

from conftest import REPO


def test_reports_each_setup_step_and_the_scoring_peak(tmp_path):
    data, artifacts, _ = small_project(tmp_path)
    build_input_memory(np.load(artifacts / "embeddings" / "train.npy"), None,
                       MemorySettings(keep=1.0, method="random", prior=False, seed=0), artifacts / "memory", "hnsw")
    proc = subprocess.run([sys.executable, str(REPO / "bench/evaluate_memory_probe.py"), str(data), str(artifacts),
                           "--queries", "7"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["queries"] == 7
    steps = [report[name] for name in ("imports_mb", "after_values_mb", "after_evaluator_mb", "after_graphs_mb")]
    assert all(step > 0 for step in steps) and report["scoring_peak_mb"] >= min(steps)
