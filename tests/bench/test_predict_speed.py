"""bench/predict_speed.py on a packaged tiny project: every variant timed with its own retrieval, the packaged model
given back, the rates the inverse of the per-query times, and the record a run writes."""

from __future__ import annotations

import json
import subprocess
import sys

from raexmc.data.dataset import Dataset
from raexmc.memory.merge import RaeRetrieval
from raexmc.rae.model import RaeModel
from tests.helpers import REPO, load_module
from tests.rae.test_predictor import build_pipeline

bench = load_module(REPO / "bench/predict_speed.py")


def test_each_variant_is_timed_with_its_own_retrieval_and_recorded(tmp_path, lf_folder, tiny_model, monkeypatch):
    folder = build_pipeline(tmp_path, lf_folder, tiny_model, "exact")
    packaged, seen = RaeModel.load(folder / "predictor"), []
    original = RaeModel.predict

    def recording(self, queries, k=10):
        seen.append(self.settings.retrieval)
        return original(self, queries, k)

    monkeypatch.setattr(RaeModel, "predict", recording)  # the real predict, its model noted on the way
    times = bench.measure(packaged, ["jython", "perl scripts", "the unix shell"], [0.5], batch_size=2, repeats=2)
    # 2 repeats x 2 variants x 2 batches, the variants taking turns within each repeat
    split = RaeRetrieval("split", 0.5)
    assert seen == [RaeRetrieval(), RaeRetrieval(), split, split] * 2
    assert set(times) == {"packaged", "split 0.5"}
    for row in times.values():
        parts = sum(row[f"{p}_ms_per_query"] for p in ("encode", "search", "score"))
        assert abs(row["total_ms_per_query"] - parts) < 2e-3
        assert abs(row["queries_per_s"] - 1000 / row["total_ms_per_query"]) <= 0.05 + 1e-3 * row["queries_per_s"]

    # the script on the same project, as a user runs it
    (tmp_path / "bench" / "results").mkdir(parents=True)
    proc = subprocess.run([sys.executable, str(REPO / "bench/predict_speed.py"), "--root", str(tmp_path), "--name",
                           "tiny", "--queries", "3", "--batch-size", "2", "--repeats", "1", "--shares", "0.25,1"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "bench/results/predict_speed_tiny.json").read_text())
    test_texts = len(list(Dataset(tmp_path / "data" / "tiny").texts("test")))
    assert report["queries"] == min(3, test_texts) and report["packaged"]["retrieval"] == "joint"
    assert list(report["variants"]) == ["packaged", "split 0.25", "split 1"]
