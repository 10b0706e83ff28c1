"""RAE with a smaller knowledge memory: bytes, accuracy and query latency per budget and method, three ways.

    python bench/memory_budget.py --root . --name foldoc --mode zero-shot --compressions none,sq8-m12,sq4-m6
    python bench/memory_budget.py compression --name foldoc --compressions none,sq8-m12,sq4-m4
    python bench/memory_budget.py scale --dataset DIR --embeddings DIR --work DIR --variants 1/full/none,0.1/kmeans/none

The table (no command) reads a reproduced project (<root>/data/<name>, <root>/artifacts/<name>/{embeddings,index,
tune}), builds each memory as the memory stage does for every keep, method, compression and prototypes weight α
asked, with and without the prior where keys merge, and scores RAE at the tune stage's λ, τ and retrieval. Record
bench/results/memory_budget_<name>.json, written after every row: {"rows": [{"dataset", "mode", "method", "keep",
"compression", "bytes", "P@1", "P@5", "R@100", "latency_ms"}], "command": {mode: command}}, metrics in percent,
methods named "<method>[+prior][+prototypes<α>]". A run replaces its mode's rows; --append only those it measures.

`compression` builds the index stage's two indexes with each compression and scores RAE at the paper's settings
(bench/results/compression_<name>.json): the table's rows (keep 1) and what explains them: bytes a key, the RSS
growth of a fresh process loading them, recall@b and score error against exact search, build and search time.
Its latency_ms is one query searched alone on one thread (as predict serves), the best of --rounds rounds.

`scale` measures a benchmark's shape without accuracy (random unit keys from scripts/random_embeddings.py will
do): each variant keep/method/compression[/α], the index stage's two indexes built once under --work, RAE at the
paper's settings (bench/results/memory_budget_scale.json; rows add "keys" and "build_s", the wall time to build
every index RAE searches).

"bytes" is what evaluate and predict load for RAE's memory, as stored: the indexes RAE searches (the memory's own
where it has them), its input keys' values (as the package stage stores them) and, with the prior, counts.npy.
"latency_ms" (but compression's) is RAE's search and scoring per query, in one batch on all cores, best of three.
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
import scipy.sparse as sp
import typer

from common import evaluator_of, rae_summary, rerun_command
from raexmc.data.dataset import Dataset
from raexmc.encoder.vectors import load_embeddings
from raexmc.evaluation.evaluator import Evaluator
from raexmc.evaluation.methods import rae_scorer
from raexmc.evaluation.metrics import recall_at_k
from raexmc.evaluation.propensity import table_propensity
from raexmc.evaluation.selection_file import read_selection
from raexmc.io import read_json, write_json
from raexmc.memory.exact import ExactIndex
from raexmc.memory.hnsw import PAPER_EF_CONSTRUCTION, PAPER_EF_SEARCH, PAPER_M
from raexmc.memory.indexes import INDEXED_KEY_SETS, build_memory_indexes, index_folder, load_joint_search
from raexmc.memory.input_memory import (
    COUNTS_FILE,
    VALUES_FILE,
    InputMemory,
    MemorySettings,
    build_input_memory,
    own_index_folders,
)
from raexmc.memory.keys_values import memory_keys, training_values
from raexmc.memory.merge import JointSearch
from raexmc.memory.persistence import index_bytes
from raexmc.memory.prototypes import prototype_weight
from raexmc.rae.model import RaeModel, RaeSettings
from raexmc.rae.scoring import PAPER_B, PAPER_LAMBDA, PAPER_TAU
from raexmc.settings import load_settings

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
DEFAULT_COMPRESSIONS = "none,fp16-m16,sq8-m16,sq8-m12,sq8-m8,sq4-m8,sq4-m6,sq4-m5,sq4-m4"
BUILT_FILE = "built.json"   # under scale's --work/index: the index stage's build seconds per key set
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


def stored_memory_bytes(memory: InputMemory, index: Path, Y: sp.csr_matrix, scratch: Path) -> int:
    """What evaluate and predict load for RAE's memory, as stored: both indexes RAE searches (the memory's
    own where it has them, else the index stage's), its input keys' values (a full memory's Y written as the
    pipeline writes it, scipy's compressed npz, under `scratch`) and, with the prior, the counts."""
    folder = memory.folder
    own = own_index_folders(folder)
    total = sum(index_bytes(own.get(key_set, index_folder(index, key_set))) for key_set in INDEXED_KEY_SETS)
    if memory.full:
        sp.save_npz(scratch / "values.npz", Y)
    total += (scratch / "values.npz" if memory.full else folder / VALUES_FILE).stat().st_size
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


def row_method(memory: InputMemory, method: str, prior: bool, weight: float) -> str:
    """A row's method: the selection ("full" at keep 1), then +prior and +prototypes<α> where used."""
    return (("full" if memory.full else method) + ("+prior" if prior else "")
            + (f"+prototypes{weight:g}" if weight else ""))


def row_key(row: dict) -> tuple:
    return row["dataset"], row.get("mode"), row["method"], row["keep"], row["compression"]


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


@app.callback(invoke_without_command=True)
def table(ctx: typer.Context,
          root: Path = typer.Option(Path("."), help="Project root holding data/<name> and artifacts/<name>."),
          name: str = typer.Option("foldoc", help="Dataset name."),
          mode: str = typer.Option("zero-shot", help="zero-shot | fine-tuned: the encoder the embeddings came from."),
          keeps: str = typer.Option("1,0.5,0.25,0.1,0", help="Shares of the input keys, comma-separated."),
          methods: str = typer.Option("random,kmeans,kmeans-labels", help="Selection methods, comma-separated."),
          params: Path = typer.Option(Path("params.yaml"), help="Parameters file (index.*, infer.b, ef_search)."),
          seed: int = typer.Option(0, help="memory.seed."),
          compressions: str = typer.Option("none", help="memory.compression names, comma-separated."),
          prototypes: str = typer.Option("0", help="memory.prototypes weights α, comma-separated (0: the label "
                                                   "texts' keys)."),
          priors: str = typer.Option("off,on", help="Rows without (off) and with (on) the prior, comma-separated; "
                                                    "on applies where keys merge, uncompressed, without prototypes. "
                                                    "One alone lets each score at its own tuned λ and τ."),
          append: bool = typer.Option(False, help="Keep the mode's other rows; replace only those measured again."),
          out: Path | None = typer.Option(None, help="Result file; default bench/results/memory_budget_<name>.json "
                                                     "(from the current folder).")) -> None:
    """The table: every memory of a reproduced project, scored at the tune stage's choice."""
    if ctx.invoked_subcommand:
        return
    if not set(priors.split(",")) <= {"off", "on"}:
        raise typer.BadParameter(f"--priors {priors!r}: expected off, on or off,on")
    prior_settings = [choice == "on" for choice in priors.split(",")]
    p = load_settings(params)
    data, artifacts = Dataset(root / "data" / name), root / "artifacts" / name
    index, selection = artifacts / "index", read_selection(artifacts / "tune")
    lam, tau = selection.lam, selection.tau
    b, ef_search = p.infer.b, p.infer.ef_search
    retrieval = selection.rae_retrieval
    index_settings = {"M": p.index.M, "ef_construction": p.index.ef_construction, "threads": p.index.threads}
    queries = np.asarray(load_embeddings(artifacts / "embeddings", "test"), dtype=np.float32)
    train, labels = (load_embeddings(artifacts / "embeddings", split) for split in ("train", "labels"))
    Y = training_values(data.label_matrix("train"), p.infer.relevance)
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
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        for keep, method, prior, compression, weight in variants:
            settings = MemorySettings(keep, method, prior, seed, compression, weight)
            folder = scratch / f"memory_{keep}_{method}_{prior}_{compression}_{weight}"
            build_input_memory(train, Y, settings, folder, "hnsw", labels=labels, **index_settings)
            memory = InputMemory(folder)
            values, rae = memory.values(Y), memory.indexes(baselines, ef_search)
            model = RaeModel(values, RaeSettings(lam, tau, b, retrieval), memory.log_counts(), rae)
            latency_ms, joint = rae_latency_ms(model, queries)
            scored = Evaluator(Y, Y_test, exclude, ab, values)
            summary = scored.summary(scored.rank(len(queries), rae_scorer(model, joint)))[0]
            rows.append({"dataset": name, "mode": mode, "method": row_method(memory, method, prior, weight),
                         "keep": keep, "compression": compression,
                         "bytes": stored_memory_bytes(memory, index, Y, scratch),
                         **{k: summary[k] for k in ("P@1", "P@5", "R@100")}, "latency_ms": latency_ms})
            print(json.dumps(rows[-1]), file=sys.stderr)
            # after every row: a stopped run keeps what it measured
            out.write_text(json.dumps(merged(earlier, mode, rows, rerun_command(), append), indent=2) + "\n")


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


@app.command()
def compression(name: str = "foldoc", data: Path = typer.Option(None, help="Dataset folder (default data/<name>)."),
                embeddings: Path = typer.Option(None, help="Embeddings folder (default artifacts/<name>/embeddings)."),
                mode: str = "zero-shot", compressions: str = DEFAULT_COMPRESSIONS, b: int = PAPER_B,
                lam: float = PAPER_LAMBDA, tau: float = PAPER_TAU, ef_search: int = PAPER_EF_SEARCH, M: int = PAPER_M,
                ef_construction: int = PAPER_EF_CONSTRUCTION, latency_queries: int = 500, rounds: int = 3,
                out: Path = typer.Option(None, help="Result file (default bench/results/compression_<name>.json).")):
    """The index stage's two indexes compressed, against exact search and one another."""
    embeddings = embeddings or Path("artifacts") / name / "embeddings"
    out = out or Path("bench/results") / f"compression_{name}.json"
    queries = np.asarray(load_embeddings(embeddings, "test"), dtype=np.float32)
    keys = memory_keys(embeddings)
    exact_hits = ExactIndex(keys).search(queries, b)
    evaluator = evaluator_of(Dataset(data or Path("data") / name))
    rows, details, memories = [], [], {}
    with tempfile.TemporaryDirectory() as scratch:
        for codec in compressions.split(","):
            index = Path(scratch) / codec
            started = time.perf_counter()
            build_memory_indexes(embeddings, index, "hnsw", M=M, ef_construction=ef_construction,
                                 ef_search=ef_search, compression=codec)
            build_s = time.perf_counter() - started
            stored = sum(index_bytes(index_folder(index, key_set)) for key_set in INDEXED_KEY_SETS)
            loaded = loaded_bytes(index)
            memory = load_joint_search(index, ef_search=ef_search)
            started = time.perf_counter()
            hits = memory.search(queries, b)
            batch_ms = 1000 * (time.perf_counter() - started) / len(queries)
            memories[codec] = load_joint_search(index, ef_search=ef_search, threads=1)
            rows.append({"dataset": name, "mode": mode, "method": "full", "keep": 1.0, "compression": codec,
                         "bytes": stored, **rae_summary(evaluator, hits, lam, tau, b)})
            details.append({"compression": codec, "bytes_per_key": round(stored / len(keys), 1),
                            "loaded_bytes": loaded, "recall@b": round(recall_at_k(hits[0], exact_hits[0]), 4),
                            "score_error": {k: round(v, 5) for k, v in score_error(hits, queries, keys).items()},
                            "build_s": round(build_s, 1), "batch_ms_per_query": round(batch_ms, 3)})
            print(json.dumps({**rows[-1], **details[-1]}), flush=True)
    latency = single_query_ms(memories, queries[:latency_queries], b, rounds)
    for row in rows:
        row["latency_ms"] = round(latency[row["compression"]], 3)
    report = {"rows": rows, "details": details, "exact_search": rae_summary(evaluator, exact_hits, lam, tau, b),
              "settings": {"lambda": lam, "tau": tau, "b": b, "ef_search": ef_search, "M": M,
                           "ef_construction": ef_construction, "keys": int(len(keys)), "dim": int(keys.shape[1]),
                           "queries": int(len(queries)), "latency_queries": latency_queries, "threads": os.cpu_count()},
              "command": rerun_command()}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")


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


@app.command()
def scale(dataset: Path = typer.Option(..., help="A download stage's folder (Y_train)."),
          embeddings: Path = typer.Option(..., help="An embed stage's folder (train, labels, test)."),
          work: Path = typer.Option(..., help="Where the indexes are built (the index stage's are kept)."),
          variants: str = typer.Option("1/full/none,1/full/sq8-m12,0.1/kmeans/none",
                                       help="Memories as keep/method/compression[/prototypes α], comma-separated."),
          M: int = typer.Option(PAPER_M, "--M", help="index.M"),
          ef_construction: int = typer.Option(100, help="index.ef_construction (the paper's is 500)."),
          queries: int = typer.Option(2000, help="Test queries timed (the first ones)."),
          out: Path = typer.Option(Path("bench/results/memory_budget_scale.json"), help="Result file."),
          append: bool = typer.Option(False, help="Keep --out's other rows; replace only those measured again.")):
    """Bytes, build time and latency of each memory at a benchmark's shape, without accuracy."""
    index = work / "index"
    train, labels = (load_embeddings(embeddings, split) for split in ("train", "labels"))
    batch = np.asarray(load_embeddings(embeddings, "test")[:queries], dtype=np.float32)
    Y = training_values(Dataset(dataset).label_matrix("train"), "binary", copy=False)
    settings = {"M": M, "ef_construction": ef_construction, "queries": len(batch)}
    earlier = earlier_report(out, append, settings)
    command = f"{earlier['command']} && {rerun_command()}" if earlier["command"] else rerun_command()
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
        rows.append({"dataset": dataset.name, "method": row_method(memory, memory_settings.method, False,
                                                                   memory_settings.prototypes),
                     "keep": memory_settings.keep, "compression": memory_settings.compression,
                     "keys": meta["input_keys"] + len(labels), "bytes": stored_memory_bytes(memory, index, Y, work),
                     "build_s": round(memory_s + sum(built[key_set] for key_set in shared), 1),
                     "latency_ms": rae_latency_ms(model, batch)[0]})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        measured = {row_key(row) for row in rows}
        kept = [row for row in earlier["rows"] if row_key(row) not in measured]
        write_json(out, {"rows": kept + rows, **settings, "command": command})


if __name__ == "__main__":
    app()
