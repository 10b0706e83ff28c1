"""bench/gpu_search.py, run by torch on the CPU at a toy shape: a row per run, the device's answers checked
against the CPU's ExactIndex, and the agreement measure able to see a difference."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from tests.helpers import REPO, load_module


def test_a_run_appends_a_row_whose_search_agrees_with_the_cpu_by_a_measure_that_sees_a_difference(tmp_path):
    out = tmp_path / "gpu_search.json"
    for _ in range(2):
        proc = subprocess.run([sys.executable, str(REPO / "bench/gpu_search.py"), "--out", str(out), "--device", "cpu",
                               "--no-half", "--train", "900", "--labels", "300", "--queries", "100", "--dim", "16",
                               "--b", "20", "--check", "30"], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())
    assert len(rows) == 2 and rows[0]["searched"] == 100
    for part in ("inputs", "labels", "joint"):
        assert rows[0]["check"][part]["id_mismatch_where_untied"] == 0.0
        assert rows[0]["check"][part]["recall_of_cpu_top_b"] == 1.0
    # the agreement measure sees a swapped id and a shifted score
    agreement = load_module(REPO / "bench/gpu_search.py").agreement
    ids, sims = np.array([[3, 1, 2]]), np.array([[0.9, 0.5, 0.1]], dtype=np.float32)
    same = agreement((ids, sims), (ids, sims))
    assert same["id_mismatch_where_untied"] == 0.0 and same["max_score_diff"] == 0.0
    other = agreement((np.array([[3, 7, 2]]), sims + np.float32(0.01)), (ids, sims))
    assert other["id_mismatch_where_untied"] == 1 / 3 and other["recall_of_cpu_top_b"] == round(2 / 3, 6)
    assert abs(other["max_score_diff"] - 0.01) < 1e-6
