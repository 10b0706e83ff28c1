"""The compressed memory index against today's (hnswlib, float32, M=64): bytes, RAE's accuracy, latency.

    python bench/compression_budget.py --name foldoc --compressions none,sq8-m12,sq4-m4

Reads data/<name> and artifacts/<name>/embeddings (or --data / --embeddings), and for every name of
`memory.compression` builds the inputs' and the labels' index as the index stage does, saves and
reopens them, and runs RAE as the evaluate stage does (JointSearch merge, λ, τ, b, ef_search) on
every test input. Writes bench/results/compression_<name>.json: rows in the memory-budget format
(`method` "full", `keep` 1.0: every key kept; numbers in percent) and, per compression, what explains
them: bytes a key, the bytes loading allocates (RSS growth of a fresh process), recall@b and the
score error against exact search, build seconds, batched search time.

`bytes` counts the two indexes as stored (vectors and graph; the values are the same for every row).
`latency_ms` is the mean CPU time of one query searched alone on one thread (as predict serves one
input) over the first `latency_queries` test inputs, the best of `rounds` rounds that take the
memories in turn (bench/results' machine is shared: wall time there measures the neighbours).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import typer

from raexmc.data.dataset import Dataset
from raexmc.encoder.vectors import load_embeddings
from raexmc.evaluation.evaluator import Evaluator, rae_scorer
from raexmc.evaluation.propensity import table_propensity
from raexmc.evaluation.recall import recall_at_k
from raexmc.memory.exact import ExactIndex
from raexmc.memory.hnsw import PAPER_EF_CONSTRUCTION, PAPER_EF_SEARCH, PAPER_M
from raexmc.memory.indexes import INDEXED_KEY_SETS, build_memory_indexes, index_folder, load_joint_search
from raexmc.memory.keys_values import memory_keys, training_values
from raexmc.memory.merge import JointSearch
from raexmc.memory.persistence import index_bytes
from raexmc.rae.model import RaeModel, RaeSettings
from raexmc.rae.scoring import PAPER_B, PAPER_TAU

DEFAULT_COMPRESSIONS = "none,fp16-m16,sq8-m16,sq8-m12,sq8-m8,pca256-sq8-m16,sq4-m8,sq4-m6,sq4-m5,sq4-m4,pca256-sq4-m8"
# Reopens an index folder in a fresh process and prints how much its resident memory grew.
_LOAD_RSS = """
import resource, sys
import faiss, hnswlib
from raexmc.memory.indexes import load_joint_search
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()
before = rss()
memory = load_joint_search(sys.argv[1])
print(rss() - before)
"""


def loaded_bytes(index: Path) -> int:
    """Resident bytes that reopening the index stage's folder adds to a fresh process."""
    done = subprocess.run([sys.executable, "-c", _LOAD_RSS, str(index)], capture_output=True, text=True, check=True)
    return int(done.stdout.split()[-1])


def single_query_ms(memories: dict[str, JointSearch], queries: np.ndarray, b: int, rounds: int) -> dict[str, float]:
    """Per memory, the mean CPU milliseconds of one query searched alone on one thread, the best of
    `rounds` rounds that take the memories in turn: CPU time of this thread, and the turns, so that other
    processes on a shared machine slow no memory more than another."""
    best = dict.fromkeys(memories, float("inf"))
    for _ in range(rounds):
        for compression, memory in memories.items():
            started = time.thread_time()
            for row in range(len(queries)):
                memory.search(queries[row:row + 1], b)
            best[compression] = min(best[compression], (time.thread_time() - started) / len(queries))
    return {compression: 1000 * seconds for compression, seconds in best.items()}


def score_error(hits: tuple[np.ndarray, np.ndarray], queries: np.ndarray, keys: np.ndarray) -> dict[str, float]:
    """How far the returned scores are from q·k on the original keys."""
    ids, sims = hits
    found = ids >= 0
    true = np.einsum("qd,qkd->qk", queries, keys[np.where(found, ids, 0)])
    error = np.abs(sims - true)[found]
    return {"mean": float(error.mean()), "max": float(error.max())}


def main(name: str = "foldoc", data: Path = typer.Option(None, help="Dataset folder (default data/<name>)."),
         embeddings: Path = typer.Option(None, help="Embeddings folder (default artifacts/<name>/embeddings)."),
         mode: str = "zero-shot", compressions: str = DEFAULT_COMPRESSIONS, b: int = PAPER_B,
         lam: float = 0.5, tau: float = PAPER_TAU, ef_search: int = PAPER_EF_SEARCH, M: int = PAPER_M,
         ef_construction: int = PAPER_EF_CONSTRUCTION, latency_queries: int = 500, rounds: int = 3,
         out: Path = typer.Option(None, help="Result file (default bench/results/compression_<name>.json).")) -> None:
    data = data or Path("data") / name
    embeddings = embeddings or Path("artifacts") / name / "embeddings"
    out = out or Path("bench/results") / f"compression_{name}.json"
    dataset = Dataset(data)
    queries = np.asarray(load_embeddings(embeddings, "test"), dtype=np.float32)
    keys = memory_keys(embeddings)
    exact_hits = ExactIndex(keys).search(queries, b)
    evaluator = Evaluator(training_values(dataset.label_matrix("train")), dataset.label_matrix("test"),
                          dataset.filter_matrix("test"), table_propensity(dataset.names).ab)

    def metrics(hits) -> dict[str, float]:
        rae = RaeModel(evaluator.Y_train, RaeSettings(lam, tau, b))
        summary = evaluator.summary(evaluator.rank(len(queries), rae_scorer(rae, hits)))[0]
        return {metric: summary[metric] for metric in ("P@1", "P@5", "R@100")}

    rows, details, memories = [], [], {}
    with tempfile.TemporaryDirectory() as scratch:
        for compression in compressions.split(","):
            index = Path(scratch) / compression
            started = time.perf_counter()
            build_memory_indexes(embeddings, index, "hnsw", M=M, ef_construction=ef_construction,
                                 ef_search=ef_search, compression=compression)
            build_s = time.perf_counter() - started
            stored = sum(index_bytes(index_folder(index, key_set)) for key_set in INDEXED_KEY_SETS)
            loaded = loaded_bytes(index)
            memory = load_joint_search(index, ef_search=ef_search)
            started = time.perf_counter()
            hits = memory.search(queries, b)
            batch_ms = 1000 * (time.perf_counter() - started) / len(queries)
            memories[compression] = load_joint_search(index, ef_search=ef_search, threads=1)
            rows.append({"dataset": name, "mode": mode, "method": "full", "keep": 1.0, "compression": compression,
                         "bytes": stored, **metrics(hits)})
            details.append({"compression": compression, "bytes_per_key": round(stored / len(keys), 1),
                            "loaded_bytes": loaded, "recall@b": round(recall_at_k(hits[0], exact_hits[0]), 4),
                            "score_error": {k: round(v, 5) for k, v in score_error(hits, queries, keys).items()},
                            "build_s": round(build_s, 1), "batch_ms_per_query": round(batch_ms, 3)})
            print(json.dumps({**rows[-1], **details[-1]}), flush=True)
    latency = single_query_ms(memories, queries[:latency_queries], b, rounds)
    for row in rows:
        row["latency_ms"] = round(latency[row["compression"]], 3)
    report = {"rows": rows, "details": details, "exact_search": metrics(exact_hits),
              "settings": {"lambda": lam, "tau": tau, "b": b, "ef_search": ef_search, "M": M,
                           "ef_construction": ef_construction, "keys": int(len(keys)), "dim": int(keys.shape[1]),
                           "queries": int(len(queries)), "latency_queries": latency_queries, "threads": os.cpu_count()},
              "command": " ".join(["python", "bench/compression_budget.py", *sys.argv[1:]])}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    typer.run(main)
