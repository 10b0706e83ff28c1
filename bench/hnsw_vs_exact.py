"""HNSW against exact search on the same embeddings: key recall, P@1 and speed.

    python bench/hnsw_vs_exact.py --name foldoc [--b 200 --ef-search 300 --M 64 --ef-construction 500]

Reads data/<name>, artifacts/<name>/embeddings (run `dvc repro embed` first), builds a fresh HNSW
index (timed), searches the top-b keys of every test input both ways, and writes
bench/results/hnsw_vs_exact_<name>.json. Recall is reported twice: by key id, and tie-aware (an
HNSW key counts when its similarity reaches the exact b-th similarity), since inputs that are
also labels give identical keys that either search may return.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import typer

from common import evaluator_of, rae_summary
from raexmc.data.dataset import Dataset
from raexmc.encoder.vectors import load_embeddings
from raexmc.evaluation.metrics import recall_at_k
from raexmc.memory.exact import ExactIndex
from raexmc.memory.hnsw import PAPER_EF_CONSTRUCTION, PAPER_EF_SEARCH, PAPER_M, build_hnsw
from raexmc.memory.keys_values import memory_keys
from raexmc.rae.scoring import PAPER_B, PAPER_LAMBDA, PAPER_TAU


def main(name: str = "foldoc", b: int = PAPER_B, ef_search: int = PAPER_EF_SEARCH, M: int = PAPER_M,
         ef_construction: int = PAPER_EF_CONSTRUCTION, lam: float = PAPER_LAMBDA, tau: float = PAPER_TAU) -> None:
    dataset = Dataset(Path("data") / name)
    embeddings = Path("artifacts") / name / "embeddings"
    keys = memory_keys(embeddings)
    queries = np.asarray(load_embeddings(embeddings, "test"), dtype=np.float32)

    started = time.perf_counter()
    hnsw = build_hnsw(keys, M=M, ef_construction=ef_construction)
    build_s = time.perf_counter() - started
    exact = ExactIndex(keys)

    timings, results = {}, {}
    for label, search in (("exact", lambda: exact.search(queries, b)),
                          ("hnsw", lambda: hnsw.search(queries, b, ef_search=ef_search))):
        started = time.perf_counter()
        results[label] = search()
        timings[label] = time.perf_counter() - started

    evaluator = evaluator_of(dataset)
    p_at_1 = {label: rae_summary(evaluator, hits, lam, tau, b)["P@1"] for label, hits in results.items()}
    report = {
        "dataset": name, "keys": int(len(keys)), "queries": int(len(queries)), "dim": int(keys.shape[1]),
        "b": b, "M": M, "ef_construction": ef_construction, "ef_search": ef_search, "threads": os.cpu_count(),
        "hnsw_build_s": round(build_s, 1),
        "queries_per_s": {label: round(len(queries) / t, 1) for label, t in timings.items()},
        "recall_by_id": round(recall_at_k(results["hnsw"][0], results["exact"][0]), 4),
        # the share of the b slots HNSW fills with a key at least as similar as the exact b-th key
        "recall_tie_aware": round(float((results["hnsw"][1] >= results["exact"][1][:, -1:] - 1e-5).mean()), 4),
        "rae_P@1": p_at_1, "P@1_difference": round(p_at_1["hnsw"] - p_at_1["exact"], 2),
    }
    out = Path("bench/results") / f"hnsw_vs_exact_{name}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    typer.run(main)
