"""The memory budget at a benchmark's shape: bytes, build time and query latency of each memory, with no
accuracy (the synthetic shapes' labels mean nothing). The rows of issue 20's table at LF-AmazonTitles-1.3M.

    python bench/memory_budget_scale.py --dataset DIR --embeddings DIR --work DIR \\
        --variants "1/full/none,1/full/sq8-m12,0.1/kmeans/none" --ef-construction 100

DIR are a download stage's folder and an embed stage's (random unit vectors will do, as
bench/random_embeddings.py writes them: build time and latency do not depend on what the keys mean). The index stage's two hnswlib indexes (every key, M and
--ef-construction) are built once under --work and kept for the next run; each variant <keep>/<method>/<compression>
is then built as the memory stage builds it. Writes --out after every row:
{"rows": [{"dataset", "method", "keep", "compression", "keys", "bytes", "build_s", "latency_ms"}], "command"}.

"bytes" is what evaluate and predict load for RAE's memory, as stored (bench/memory_budget.py's
definition). "build_s" is the wall time to build every index RAE searches: the index stage's labels'
index (measured here) plus the memory stage, or the index stage's two for the full memory. "latency_ms"
is RAE's search and scoring per query (λ 0.5, τ 0.04, b and ef_search the paper's) over --queries test
queries in one batch on all cores, the best of three.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import typer

from memory_budget import rae_latency_ms, stored_memory_bytes
from raexmc.data.dataset import Dataset
from raexmc.encoder.vectors import load_embeddings
from raexmc.io import read_json, write_json
from raexmc.memory.hnsw import PAPER_EF_SEARCH, PAPER_M
from raexmc.memory.indexes import build_memory_indexes, load_joint_search
from raexmc.memory.input_memory import InputMemory, MemorySettings, build_input_memory
from raexmc.memory.keys_values import training_values
from raexmc.rae.scoring import PAPER_B, PAPER_LAMBDA, PAPER_TAU

BUILT_FILE = "built.json"   # under --work/index: the index stage's build seconds per key set


def index_stage(embeddings: Path, index: Path, M: int, ef_construction: int) -> dict[str, dict[str, float]]:
    """The index stage's two indexes under `index`, built once (their build seconds kept beside them)."""
    if not (index / BUILT_FILE).is_file():
        built = build_memory_indexes(embeddings, index, "hnsw", M=M, ef_construction=ef_construction)
        write_json(index / BUILT_FILE, built)
    return read_json(index / BUILT_FILE)


def parse_variant(text: str) -> MemorySettings:
    keep, method, compression = text.split("/")
    return MemorySettings(keep=float(keep), method="kmeans" if method == "full" else method, prior=False, seed=0,
                          compression=compression)


def main(dataset: Path = typer.Option(..., help="A download stage's folder (Y_train)."),
         embeddings: Path = typer.Option(..., help="An embed stage's folder (train, labels, test)."),
         work: Path = typer.Option(..., help="Where the indexes are built (the index stage's are kept)."),
         variants: str = typer.Option("1/full/none,1/full/sq8-m12,0.1/kmeans/none",
                                      help="Memories as keep/method/compression, comma-separated."),
         M: int = typer.Option(PAPER_M, "--M", help="index.M"),
         ef_construction: int = typer.Option(100, help="index.ef_construction (the paper's is 500)."),
         queries: int = typer.Option(2000, help="Test queries timed (the first ones)."),
         out: Path = typer.Option(Path("bench/results/memory_budget_scale.json"), help="Result file.")) -> None:
    index = work / "index"
    built = index_stage(embeddings, index, M, ef_construction)
    train, labels = (load_embeddings(embeddings, split) for split in ("train", "labels"))
    batch = np.asarray(load_embeddings(embeddings, "test")[:queries], dtype=np.float32)
    Y = training_values(Dataset(dataset).label_matrix("train"), "binary", copy=False)
    baselines = load_joint_search(index, ef_search=PAPER_EF_SEARCH)
    rows, command = [], "python bench/memory_budget_scale.py " + shlex.join(sys.argv[1:])
    for text in variants.split(","):
        settings = parse_variant(text)
        folder = work / f"memory_{text.replace('/', '_')}"
        started = time.perf_counter()
        meta = build_input_memory(train, Y, settings, folder, "hnsw", labels=labels, M=M,
                                  ef_construction=ef_construction)
        memory_s = time.perf_counter() - started
        memory = InputMemory(folder)
        # the index stage's indexes RAE searches: both for the full memory, the labels' beside selected keys
        shared = ([] if memory.compression != "none" else ["labels"] if not memory.full else ["inputs", "labels"])
        build_s = memory_s + sum(built[key_set]["build_s"] for key_set in shared)
        latency_ms, _ = rae_latency_ms(memory, memory.indexes(baselines, PAPER_EF_SEARCH), batch,
                                       memory.values(Y), PAPER_LAMBDA, PAPER_TAU, PAPER_B)
        rows.append({"dataset": dataset.name, "method": "full" if memory.full else settings.method,
                     "keep": settings.keep, "compression": settings.compression,
                     "keys": meta["input_keys"] + len(labels), "bytes": stored_memory_bytes(memory, index, Y, work),
                     "build_s": round(build_s, 1), "latency_ms": latency_ms})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        out.write_text(json.dumps({"rows": rows, "M": M, "ef_construction": ef_construction, "queries": len(batch),
                                   "command": command}, indent=2) + "\n")


if __name__ == "__main__":
    typer.run(main)
