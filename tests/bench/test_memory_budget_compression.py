"""bench/memory_budget.py compression: the score error it reports and the memory a reopened index adds."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from raexmc.memory.indexes import build_memory_indexes
from test_memory_budget import COLUMNS, small_project
from tests.helpers import REPO, load_module


def test_score_error_compares_returned_scores_with_inner_products_on_the_original_keys():
    bench = load_module(REPO / "bench/memory_budget.py")
    queries = np.array([[1.0, 0.0], [0.6, 0.8]], dtype=np.float32)
    keys = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    ids = np.array([[0, 1], [1, -1]])
    sims = np.array([[0.9, 0.05], [0.8, -np.inf]], dtype=np.float32)  # true: 1.0, 0.0; 0.8 (and padding)
    error = bench.score_error((ids, sims), queries, keys)
    # the sims are fp32 (0.9, 0.05, 0.8 each within 3e-8 of their decimal)
    assert np.isclose(error["mean"], (0.1 + 0.05 + 0.0) / 3, rtol=0, atol=1e-7)
    assert np.isclose(error["max"], 0.1, rtol=0, atol=1e-7)


def test_loaded_bytes_of_a_compressed_memory_is_about_its_files(tmp_path):
    """A reopened sq8 memory holds its codes and graph: at least the codes (1 byte a dimension), and not
    the float32 keys it was built from (4 bytes a dimension)."""
    bench = load_module(REPO / "bench/memory_budget.py")
    rng = np.random.default_rng(0)
    (tmp_path / "embeddings").mkdir()
    for split, n in (("train", 6_000), ("labels", 3_000)):
        np.save(tmp_path / "embeddings" / f"{split}.npy", rng.standard_normal((n, 256)).astype(np.float32))
    build_memory_indexes(tmp_path / "embeddings", tmp_path / "index", "hnsw", M=8, ef_construction=40, threads=1,
                         progress=False, compression="sq8")
    assert 9_000 * 256 <= bench.loaded_bytes(tmp_path / "index") < 9_000 * 256 * 4


def test_a_run_writes_the_tables_rows_and_exact_search_beside_them(tmp_path):
    """On 100 keys the uncompressed HNSW search is exact: its row scores as exact search does, its recall is 1."""
    small_project(tmp_path)
    proc = subprocess.run([sys.executable, str(REPO / "bench/memory_budget.py"), "compression", "--name", "tiny",
                           "--compressions", "none,sq8", "--b", "10", "--latency-queries", "3", "--rounds", "1"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "bench/results/compression_tiny.json").read_text())
    assert report["command"] == ("python bench/memory_budget.py compression --name tiny --compressions none,sq8 "
                                 "--b 10 --latency-queries 3 --rounds 1")
    assert [list(row) for row in report["rows"]] == [COLUMNS] * 2
    assert [(row["method"], row["keep"], row["compression"]) for row in report["rows"]] == [
        ("full", 1.0, "none"), ("full", 1.0, "sq8")]
    none, sq8 = report["details"]
    assert none["recall@b"] == 1.0 and none["score_error"]["max"] < 1e-5
    assert {k: report["rows"][0][k] for k in ("P@1", "P@5", "R@100")} == report["exact_search"]
    assert sq8["bytes_per_key"] < none["bytes_per_key"]
