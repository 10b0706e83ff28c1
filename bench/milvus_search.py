"""Milvus Lite beside the in-process backends: is it exact search, and what does it cost.

    python bench/milvus_search.py equal EMBEDDINGS OUT.json        # every test query's top-b, Milvus Lite vs exact
    python bench/milvus_search.py cost EMBEDDINGS BACKEND M EFC N_QUERIES   # one JSON line: insert/search s, peak RSS

`equal` builds both key sets' Milvus Lite collections (FLAT, and HNSW at the paper's M, efC, ef) and compares
each test query's top-b of the inputs, the labels and their merge with the exact backend's (ties by id): the
share of rows whose ids are equal and the largest similarity difference. `cost` runs one backend in its own
process (so its peak RSS is its own): the build of both key sets, then N_QUERIES test queries' top-b of each,
and the bytes the built indexes hold on disk.
"""

from __future__ import annotations

import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from raexmc.encoder.vectors import load_embeddings
from raexmc.memory.hnsw import PAPER_EF_CONSTRUCTION, PAPER_EF_SEARCH, PAPER_M
from raexmc.memory.indexes import INDEXED_KEY_SETS, build_memory_indexes, load_joint_search
from raexmc.memory.keys_values import memory_keys

B = 200


def searches(index: Path, keys, queries, ef: int):
    joint = load_joint_search(index, keys, ef_search=ef, threads=1)
    inputs, labels = joint.search_parts(queries, B)
    return {"inputs": inputs, "labels": labels, "joint": joint.merge(inputs, labels, B)}


def equal(embeddings: Path, out: Path) -> None:
    queries = np.asarray(load_embeddings(embeddings, "test"), dtype=np.float32)
    record = {"embeddings": str(embeddings), "queries": len(queries), "dim": int(queries.shape[1]), "b": B}
    keys_count = len(memory_keys(embeddings))
    with tempfile.TemporaryDirectory() as scratch:
        build_memory_indexes(embeddings, Path(scratch) / "exact", "exact")
        exact = searches(Path(scratch) / "exact", memory_keys(embeddings), queries, PAPER_EF_SEARCH)
        for kind in ("FLAT", "HNSW"):
            build_memory_indexes(embeddings, Path(scratch) / kind, "milvus", M=PAPER_M,
                                 ef_construction=PAPER_EF_CONSTRUCTION, index_type=kind)
            started = time.perf_counter()
            found = searches(Path(scratch) / kind, None, queries, PAPER_EF_SEARCH)
            graph = sum(path.stat().st_size for path in (Path(scratch) / kind).rglob("*.idx"))
            record[kind] = {"search_s": round(time.perf_counter() - started, 1), "M": PAPER_M,
                            "ef_construction": PAPER_EF_CONSTRUCTION, "ef_search": PAPER_EF_SEARCH,
                            "index_bytes_per_key": round(graph / keys_count, 1), **{
                part: {"rows_equal": float((found[part][0] == exact[part][0]).all(axis=1).mean()),
                       "ids_equal": float((found[part][0] == exact[part][0]).mean()),
                       "max_sim_diff": float(np.abs(found[part][1] - exact[part][1]).max())} for part in exact}}
            print(kind, json.dumps(record[kind]), flush=True)
    out.write_text(json.dumps(record, indent=1) + "\n")


def cost(embeddings: Path, backend: str, M: int, ef_construction: int, n_queries: int) -> None:
    queries = np.asarray(load_embeddings(embeddings, "test")[:n_queries], dtype=np.float32)
    with tempfile.TemporaryDirectory() as scratch:
        index = Path(scratch) / "index"
        started = time.perf_counter()
        build_memory_indexes(embeddings, index, backend, M=M, ef_construction=ef_construction, threads=1,
                             progress=False)
        build_s = time.perf_counter() - started
        disk = {key_set: sum(f.stat().st_size for f in (index / key_set).rglob("*") if f.is_file())
                for key_set in INDEXED_KEY_SETS}
        started = time.perf_counter()
        searches(index, None, queries, max(B, PAPER_EF_SEARCH))
        search_s = time.perf_counter() - started
    keys = {key_set: len(load_embeddings(embeddings, split)) for key_set, split in zip(INDEXED_KEY_SETS,
                                                                                         ("train", "labels"))}
    print(json.dumps({"backend": backend, "M": M, "ef_construction": ef_construction, "keys": keys,
                      "dim": int(queries.shape[1]), "insert_s": round(build_s, 1),
                      "keys_per_s": round(sum(keys.values()) / build_s), "queries": n_queries,
                      "search_s": round(search_s, 1), "queries_per_s": round(n_queries / search_s, 1),
                      "disk_bytes": disk, "disk_bytes_per_key": round(sum(disk.values()) / sum(keys.values()), 1),
                      "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))


if __name__ == "__main__":
    if sys.argv[1] == "equal":
        equal(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        cost(Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
