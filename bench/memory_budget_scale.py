"""The memory budget at a benchmark's shape: bytes, build time and query latency of each memory, with no
accuracy (the synthetic shapes' labels mean nothing). The rows of docs/memory.md's table at LF-AmazonTitles-1.3M.

    python bench/memory_budget_scale.py --dataset DIR --embeddings DIR --work DIR \\
        --variants "1/full/none,1/full/sq8-m12,0.1/kmeans/none" --ef-construction 100

DIR are a download stage's folder and an embed stage's (random unit vectors will do, as
bench/random_embeddings.py writes them: build time and latency do not depend on what the keys mean). Each
variant <keep>/<method>/<compression>[/<α>] (α: memory.prototypes, 0 where left out) is built as the memory
stage builds it. The index stage's two hnswlib indexes (every key, M and --ef-construction) are built under
--work the first time a variant searches one, and kept for later runs. Writes --out after every row
(with --append, beside its earlier rows):
{"rows": [{"dataset", "method", "keep", "compression", "keys", "bytes", "build_s", "latency_ms"}], "M",
"ef_construction", "queries", "command"}; a method with label prototypes is named <method>+prototypes<α>.

"bytes" is what evaluate and predict load for RAE's memory, as stored (bench/memory_budget.py's
definition). "build_s" is the wall time to build every index RAE searches: the memory stage, plus
those of the index stage's two that RAE searches (the inputs' at keep 1 without compression, the labels'
without compression or prototypes). "latency_ms"
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

from memory_budget import rae_latency_ms, row_method, stored_memory_bytes
from raexmc.data.dataset import Dataset
from raexmc.encoder.vectors import load_embeddings
from raexmc.io import read_json, write_json
from raexmc.memory.hnsw import PAPER_EF_SEARCH, PAPER_M
from raexmc.memory.indexes import INDEXED_KEY_SETS, build_memory_indexes, load_joint_search
from raexmc.memory.input_memory import InputMemory, MemorySettings, build_input_memory, own_index_folders
from raexmc.memory.keys_values import training_values
from raexmc.memory.prototypes import prototype_weight
from raexmc.rae.model import RaeModel, RaeSettings
from raexmc.rae.scoring import PAPER_B, PAPER_LAMBDA, PAPER_TAU

BUILT_FILE = "built.json"   # under --work/index: the index stage's build seconds per key set


def index_stage(embeddings: Path, index: Path, M: int, ef_construction: int) -> dict[str, float]:
    """The build seconds of the index stage's two indexes under `index`, per key set: built once, and kept
    beside them with the settings that built them (a later run with others is refused)."""
    path = index / BUILT_FILE
    if not path.is_file():
        built = build_memory_indexes(embeddings, index, "hnsw", M=M, ef_construction=ef_construction)
        write_json(path, {"M": M, "ef_construction": ef_construction,
                          "build_s": {key_set: done["build_s"] for key_set, done in built.items()}})
    record = read_json(path)
    if (record["M"], record["ef_construction"]) != (M, ef_construction):
        raise SystemExit(f"{index} holds indexes built with M {record['M']}, efC {record['ef_construction']}; "
                         f"give another --work for M {M}, efC {ef_construction}")
    return record["build_s"]


def parse_variant(text: str) -> MemorySettings:
    """keep/method/compression[/α]: α weighs the label prototypes (memory.prototypes; 0, the label texts' keys,
    where left out)."""
    keep, method, compression, *weight = text.split("/")
    return MemorySettings(keep=float(keep), method="kmeans" if method == "full" else method, prior=False, seed=0,
                          compression=compression,
                          prototypes=prototype_weight(float(weight[0]) if weight else 0.0, float(keep), "hnsw",
                                                      "--variants"))


def earlier_report(out: Path, append: bool, settings: dict) -> dict:
    """The rows and command `out` holds, kept where `append` asks (measured with the same `settings`)."""
    if not append or not out.is_file():
        return {"rows": [], "command": ""}
    earlier = read_json(out)
    if any(earlier.get(key) != value for key, value in settings.items()):
        raise SystemExit(f"{out} was measured with other settings than {settings}; --append needs the same")
    return earlier


def row_key(row: dict) -> tuple:
    return row["dataset"], row["method"], row["keep"], row["compression"]


def main(dataset: Path = typer.Option(..., help="A download stage's folder (Y_train)."),
         embeddings: Path = typer.Option(..., help="An embed stage's folder (train, labels, test)."),
         work: Path = typer.Option(..., help="Where the indexes are built (the index stage's are kept)."),
         variants: str = typer.Option("1/full/none,1/full/sq8-m12,0.1/kmeans/none",
                                      help="Memories as keep/method/compression[/prototypes α], comma-separated."),
         M: int = typer.Option(PAPER_M, "--M", help="index.M"),
         ef_construction: int = typer.Option(100, help="index.ef_construction (the paper's is 500)."),
         queries: int = typer.Option(2000, help="Test queries timed (the first ones)."),
         out: Path = typer.Option(Path("bench/results/memory_budget_scale.json"), help="Result file."),
         append: bool = typer.Option(False, help="Keep --out's other rows; replace only those measured again.")) -> None:
    index = work / "index"
    train, labels = (load_embeddings(embeddings, split) for split in ("train", "labels"))
    batch = np.asarray(load_embeddings(embeddings, "test")[:queries], dtype=np.float32)
    Y = training_values(Dataset(dataset).label_matrix("train"), "binary", copy=False)
    settings = {"M": M, "ef_construction": ef_construction, "queries": len(batch)}
    earlier = earlier_report(out, append, settings)
    command = "python bench/memory_budget_scale.py " + shlex.join(sys.argv[1:])
    command = f"{earlier['command']} && {command}" if earlier["command"] else command
    rows, built, baselines = [], {}, None   # the index stage's: built or loaded when a variant first searches it
    for text in variants.split(","):
        memory_settings = parse_variant(text)
        folder = work / f"memory_{text.replace('/', '_')}"
        started = time.perf_counter()
        meta = build_input_memory(train, Y, memory_settings, folder, "hnsw", labels=labels, M=M,
                                  ef_construction=ef_construction)
        memory_s = time.perf_counter() - started
        memory = InputMemory(folder)
        # RAE searches the memory's own indexes, and the index stage's (built once, on first need) for the rest
        shared = [key_set for key_set in INDEXED_KEY_SETS if key_set not in own_index_folders(folder)]
        if shared and baselines is None:
            built = index_stage(embeddings, index, M, ef_construction)
            baselines = load_joint_search(index, ef_search=PAPER_EF_SEARCH)
        rae = memory.indexes(baselines, PAPER_EF_SEARCH)
        model = RaeModel(memory.values(Y), RaeSettings(PAPER_LAMBDA, PAPER_TAU, PAPER_B), memory.log_counts(), rae)
        latency_ms, _ = rae_latency_ms(model, batch)
        rows.append({"dataset": dataset.name, "method": row_method(memory, memory_settings.method, False,
                                                                   memory_settings.prototypes),
                     "keep": memory_settings.keep, "compression": memory_settings.compression,
                     "keys": meta["input_keys"] + len(labels), "bytes": stored_memory_bytes(memory, index, Y, work),
                     "build_s": round(memory_s + sum(built[key_set] for key_set in shared), 1),
                     "latency_ms": latency_ms})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        measured = {row_key(row) for row in rows}
        kept = [row for row in earlier["rows"] if row_key(row) not in measured]
        write_json(out, {"rows": kept + rows, **settings, "command": command})


if __name__ == "__main__":
    typer.run(main)
