"""bench/compression_budget.py: the score error it reports and the memory a reopened index adds."""

from __future__ import annotations

import numpy as np

from bench_scripts import load_bench_module
from raexmc.memory.indexes import build_memory_indexes


def test_score_error_compares_returned_scores_with_inner_products_on_the_original_keys():
    bench = load_bench_module("compression_budget.py")
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
    bench = load_bench_module("compression_budget.py")
    rng = np.random.default_rng(0)
    (tmp_path / "embeddings").mkdir()
    for split, n in (("train", 6_000), ("labels", 3_000)):
        np.save(tmp_path / "embeddings" / f"{split}.npy", rng.standard_normal((n, 256)).astype(np.float32))
    build_memory_indexes(tmp_path / "embeddings", tmp_path / "index", "hnsw", M=8, ef_construction=40, threads=1,
                         progress=False, compression="sq8")
    assert 9_000 * 256 <= bench.loaded_bytes(tmp_path / "index") < 9_000 * 256 * 4
