"""RAE with a smaller knowledge memory: bytes, P@1, P@5, R@100 and query latency per budget and method.

    python bench/memory_budget.py --root . --name foldoc --mode zero-shot --compressions none,sq8-m12,sq4-m6

Reads <root>/data/<name> and <root>/artifacts/<name>/{embeddings,index,tune} (a `dvc repro` of the
project), builds each memory as the memory stage does (HNSW at params.yaml's index.*: M, ef_construction)
for every keep of --keeps and method of --methods, with and without the prior for the merging methods (--priors),
and scores RAE at the tune stage's λ, τ and retrieval (joint, or split at its label share) and infer.b / ef_search. The full memory (keep 1) is the index
stage's own inputs' index. Each variant is built with each compression of --compressions
(memory.compression: its input keys' and labels' indexes compressed); the prior rides with "none" only.
Writes --out (default bench/results/memory_budget_<name>.json) after every row (a stopped run keeps what it measured): {"rows": [{"dataset", "mode", "method", "keep",
"compression", "bytes", "P@1", "P@5", "R@100", "latency_ms"}], "command": {mode: command}}, the metrics in
percent, a method with the prior named "<method>+prior". A run replaces its mode's rows and keeps the other
mode's; with --append it replaces only the rows it measures again and chains its command to the mode's,
so that a few costly variants join a table without rebuilding the rest.

"bytes" is what evaluate and predict load for RAE's memory, as stored: both indexes RAE searches (the
labels' and the memory's input keys', vectors and graph; the memory's own where it has them), the values RAE's input keys carry (Y_train.npz as the package
stage stores it, or the selected keys' values.npz) and, with the prior, counts.npy. "latency_ms" is RAE's
search (both indexes, the merge, the prior) and scoring per test query, all queries in one batch on all
cores, the best of three.
"""

from __future__ import annotations

import json
import shlex
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import typer

from raexmc.data.dataset import Dataset
from raexmc.encoder.vectors import load_embeddings
from raexmc.evaluation.evaluator import Evaluator, rae_scorer
from raexmc.evaluation.propensity import table_propensity
from raexmc.evaluation.selection import rae_retrieval, read_selection
from raexmc.memory.indexes import INDEXED_KEY_SETS, index_folder, load_joint_search
from raexmc.memory.input_memory import (COUNTS_FILE, VALUES_FILE, InputMemory, MemorySettings, build_input_memory,
                                        own_index_folders)
from raexmc.memory.keys_values import training_values
from raexmc.params import load_params
from raexmc.rae.model import RaeModel, RaeSettings


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def stored_bytes(values: sp.csr_matrix, scratch: Path) -> int:
    """The size of `values` written as the pipeline writes them (scipy's compressed npz)."""
    sp.save_npz(scratch / "values.npz", values)
    return (scratch / "values.npz").stat().st_size


def stored_memory_bytes(memory: InputMemory, index: Path, Y: sp.csr_matrix, scratch: Path) -> int:
    """What evaluate and predict load for RAE's memory, as stored: both indexes RAE searches (the memory's
    own where it has them, else the index stage's), its input keys' values and, with the prior, the counts."""
    folder = memory.folder
    own = own_index_folders(folder)
    total = sum(folder_bytes(own.get(key_set, index_folder(index, key_set))) for key_set in INDEXED_KEY_SETS)
    total += stored_bytes(Y, scratch) if memory.full else (folder / VALUES_FILE).stat().st_size
    return total + ((folder / COUNTS_FILE).stat().st_size if memory.log_counts() is not None else 0)


def rae_latency_ms(model: RaeModel, queries: np.ndarray) -> tuple[float, tuple]:
    """RAE's search (both indexes, the merge, the prior) and scoring per query, all `queries` in one batch,
    the best of three; also the joint top-b it found."""
    latencies = []
    for _ in range(3):
        started = time.perf_counter()
        joint = model.retrieve(queries)
        model.scores(*joint)
        latencies.append(time.perf_counter() - started)
    return round(1000 * min(latencies) / len(queries), 4), joint


def main(root: Path = typer.Option(Path("."), help="Project root holding data/<name> and artifacts/<name>."),
         name: str = typer.Option("foldoc", help="Dataset name."),
         mode: str = typer.Option("zero-shot", help="zero-shot | fine-tuned: the encoder the embeddings came from."),
         keeps: str = typer.Option("1,0.5,0.25,0.1,0", help="Shares of the input keys, comma-separated."),
         methods: str = typer.Option("random,kmeans,kmeans-labels", help="Selection methods, comma-separated."),
         params: Path = typer.Option(Path("params.yaml"), help="Parameters file (index.*, infer.b, ef_search)."),
         seed: int = typer.Option(0, help="memory.seed."),
         compressions: str = typer.Option("none", help="memory.compression names, comma-separated."),
         prototypes: str = typer.Option("0", help="memory.prototypes weights α, comma-separated (0: the label "
                                                  "texts' keys); a row with α > 0 is named <method>+prototypes<α>."),
         priors: str = typer.Option("off,on", help="Rows without (off) and with (on) the prior, comma-separated; "
                                                   "on applies where keys merge, uncompressed, without prototypes. "
                                                   "One alone lets each score at its own tuned λ and τ."),
         append: bool = typer.Option(False, help="Keep the mode's other rows; replace only those measured again."),
         out: Path | None = typer.Option(None, help="Result file; default bench/results/memory_budget_<name>.json "
                                                    "(from the current folder).")) -> None:
    if not set(priors.split(",")) <= {"off", "on"}:
        raise typer.BadParameter(f"--priors {priors!r}: expected off, on or off,on")
    prior_settings = [choice == "on" for choice in priors.split(",")]
    p = load_params(params)
    data, artifacts = Dataset(root / "data" / name), root / "artifacts" / name
    index, selection = artifacts / "index", read_selection(artifacts / "tune")
    lam, tau, b, ef_search = selection["lambda"], selection["tau"], p.typed("infer.b", int), p.typed("infer.ef_search", int)
    retrieval = rae_retrieval(selection)
    index_settings = {"M": p.typed("index.M", int), "ef_construction": p.typed("index.ef_construction", int),
                      "threads": p.typed("index.threads", int)}
    queries = np.asarray(load_embeddings(artifacts / "embeddings", "test"), dtype=np.float32)
    train, labels = (load_embeddings(artifacts / "embeddings", split) for split in ("train", "labels"))
    Y = training_values(data.label_matrix("train"), p.typed("infer.relevance", str))
    Y_test, exclude, ab = data.label_matrix("test"), data.filter_matrix("test"), table_propensity(data.names).ab
    baselines = load_joint_search(index, ef_search=ef_search)

    variants = []  # (keep, method, prior, compression, α): keep 1 once (every method keeps every input); the prior
    for keep in map(float, keeps.split(",")):  # where keys merge, uncompressed and without prototypes
        for method in methods.split(",")[:1] if keep == 1.0 else methods.split(","):
            for compression in compressions.split(","):
                for weight in map(float, prototypes.split(",")):
                    variants += [(keep, method, prior, compression, weight) for prior in prior_settings
                                 if not prior or (compression == "none" and method != "random" and 0.0 < keep < 1.0
                                                  and weight == 0)]
    out = out or Path("bench/results") / f"memory_budget_{name}.json"
    earlier = json.loads(out.read_text()) if out.is_file() else {"rows": [], "command": {}}
    command = "python bench/memory_budget.py " + shlex.join(sys.argv[1:])
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        for keep, method, prior, compression, weight in variants:
            settings = MemorySettings(keep, method, prior, seed, compression, weight)
            folder = scratch / f"memory_{keep}_{method}_{prior}_{compression}_{weight}"
            build_input_memory(train, Y, settings, folder, "hnsw", labels=labels, **index_settings)
            memory = InputMemory(folder)
            values, rae = memory.values(Y), memory.indexes(baselines, ef_search)
            memory_bytes = stored_memory_bytes(memory, index, Y, scratch)
            model = RaeModel(values, RaeSettings(lam, tau, b, retrieval), memory.log_counts(), rae)
            latency_ms, joint = rae_latency_ms(model, queries)
            scored = Evaluator(Y, Y_test, exclude, ab, values)
            summary = scored.summary(scored.rank(len(queries), rae_scorer(model, joint)))[0]
            rows.append({"dataset": name, "mode": mode, "method": row_method(memory, method, prior, weight),
                         "keep": keep, "compression": compression, "bytes": memory_bytes,
                         **{k: summary[k] for k in ("P@1", "P@5", "R@100")},
                         "latency_ms": latency_ms})
            print(json.dumps(rows[-1]), file=sys.stderr)
            out.write_text(json.dumps(merged(earlier, mode, rows, command, append), indent=2) + "\n")  # after
            # every row: a stopped run keeps what it measured


def row_method(memory: InputMemory, method: str, prior: bool, weight: float) -> str:
    """A row's method: the selection ("full" at keep 1), then +prior and +prototypes<α> where used."""
    return (("full" if memory.full else method) + ("+prior" if prior else "")
            + (f"+prototypes{weight:g}" if weight else ""))


def row_key(row: dict) -> tuple:
    return row["mode"], row["method"], row["keep"], row["compression"]


def merged(earlier: dict, mode: str, rows: list[dict], command: str, append: bool = False) -> dict:
    """`rows` as `mode`'s, beside the other mode's rows and command from the `earlier` file: one file per
    dataset, both modes. With `append`, the mode's earlier rows stay too, but for those `rows` measure
    again, and the mode's command becomes the earlier one followed by this one."""
    measured = {row_key(row) for row in rows}
    kept = [row for row in earlier["rows"]
            if row["mode"] != mode or (append and row_key(row) not in measured)]
    if append and mode in earlier["command"]:
        command = earlier["command"][mode] + " && " + command
    return {"rows": kept + rows, "command": {**earlier["command"], mode: command}}


if __name__ == "__main__":
    typer.run(main)
