"""One HNSW graph over the joint keys [X_train; Z_labels] against the merge of a graph over the inputs
and one over the labels: build time, bytes on disk, search speed and recall@b of the joint top-b.

    python bench/joint_merge.py --name foldoc [--embeddings DIR --b 200 --ef-search 300 --M 64 --ef-construction 500]

Reads artifacts/<name>/embeddings (or --embeddings), builds both designs with the same settings and
threads (each timed `--repeats` times, wall and CPU seconds, the fastest kept), saves each graph to measure its bytes,
searches the top-b keys of every test input at each beam of the sweep and compares with the exact
joint top-b (search speed on a shared machine is noisy; recall is not). The index
stage needs the inputs' and the labels' graph anyway (kNN and the dual encoder), so its cost today
is all three graphs and with the merge the two alone. Writes bench/results/joint_merge_<name>.json.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import typer

from hnsw_vs_exact import tie_aware_recall
from raexmc.encoder.vectors import load_embeddings
from raexmc.evaluation.recall import recall_at_k
from raexmc.memory.exact import ExactIndex
from raexmc.memory.hnsw import PAPER_EF_CONSTRUCTION, PAPER_EF_SEARCH, PAPER_M, build_hnsw, resolve_threads
from raexmc.memory.keys_values import memory_keys
from raexmc.memory.merge import JointSearch
from raexmc.memory.persistence import save_index
from raexmc.rae.scoring import PAPER_B


def timed(work):
    """What `work()` returns, its wall seconds and the CPU seconds of this process (all its threads):
    on a shared machine the CPU time moves less with the other load than the wall time does."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = work()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def saved_bytes(index, folder: Path) -> int:
    save_index(index, folder)
    return sum(path.stat().st_size for path in folder.iterdir())


def main(name: str = "foldoc", embeddings: Path = typer.Option(None, help="Default: artifacts/<name>/embeddings."),
         b: int = PAPER_B, ef_search: int = PAPER_EF_SEARCH, M: int = PAPER_M,
         ef_construction: int = PAPER_EF_CONSTRUCTION, threads: int = 0, repeats: int = 1,
         ef_sweep: list[int] = typer.Option([200, 400], help="Beams searched besides --ef-search (>= b)."),
         out: Path = typer.Option(None, help="Default: bench/results/joint_merge_<name>.json.")) -> None:
    load_at_start = os.getloadavg()[0]
    embeddings = embeddings or Path("artifacts") / name / "embeddings"
    queries = np.asarray(load_embeddings(embeddings, "test"), dtype=np.float32)
    key_sets = {key_set: memory_keys(embeddings, key_set) for key_set in ("joint", "inputs", "labels")}
    threads = resolve_threads(threads)
    settings = {"M": M, "ef_construction": ef_construction, "ef_search": ef_search, "threads": threads}
    exact_ids, exact_sims = ExactIndex(key_sets["joint"]).search(queries, b)

    graphs, build_s, build_cpu_s, disk = {}, {}, {}, {}
    for _ in range(repeats):  # the key sets take turns, so a burst of other load hits each alike
        for key_set, keys in key_sets.items():
            graphs[key_set], wall, cpu = timed(lambda: build_hnsw(keys, progress_label=key_set, **settings))
            build_s[key_set] = min(wall, build_s.get(key_set, wall))
            build_cpu_s[key_set] = min(cpu, build_cpu_s.get(key_set, cpu))
    with tempfile.TemporaryDirectory() as tmp:
        for key_set, graph in graphs.items():
            disk[key_set] = saved_bytes(graph, Path(tmp) / key_set)
    merge = JointSearch(graphs["inputs"], graphs["labels"])
    sweep = []
    for ef in sorted({*ef_sweep, ef_search}):
        for graph in graphs.values():
            graph.ef_search = ef  # the beam both designs search with
        for label, search in (("joint_graph", graphs["joint"].search), ("merge", merge.search)):
            (ids, sims), wall, cpu = timed(lambda: search(queries, b))
            sweep.append({"design": label, "ef_search": ef, "recall_by_id": round(recall_at_k(ids, exact_ids), 4),
                          "recall_tie_aware": round(tie_aware_recall(sims, exact_sims), 4),
                          "queries_per_s": round(len(queries) / wall, 1),
                          "cpu_ms_per_query": round(1000 * cpu / len(queries), 3)})
    design = {row["design"]: {k: v for k, v in row.items() if k not in ("design", "ef_search")}
              for row in sweep if row["ef_search"] == ef_search}
    parts = ("inputs", "labels")
    design["joint_graph"].update(build_s=round(build_s["joint"], 1), build_cpu_s=round(build_cpu_s["joint"], 1),
                                 bytes=disk["joint"])
    design["merge"].update(build_s=round(sum(build_s[k] for k in parts), 1),
                           build_cpu_s=round(sum(build_cpu_s[k] for k in parts), 1), bytes=sum(disk[k] for k in parts))
    report = {
        "dataset": name, "command": "python " + shlex.join(sys.argv),
        "machine": f"{os.cpu_count()} CPUs, load average {load_at_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end",
        "keys": {key_set: int(len(keys)) for key_set, keys in key_sets.items()}, "queries": int(len(queries)),
        "dim": int(queries.shape[1]), "b": b, "M": M, "ef_construction": ef_construction, "ef_search": ef_search,
        "threads": threads, "repeats": repeats,
        "build_s": {key_set: round(seconds, 1) for key_set, seconds in build_s.items()},
        "build_cpu_s": {key_set: round(seconds, 1) for key_set, seconds in build_cpu_s.items()}, "bytes": disk,
        "designs": design, "ef_sweep": sweep,
        "index_stage": {"today (joint + inputs + labels)": {"build_s": round(sum(build_s.values()), 1),
                                                            "build_cpu_s": round(sum(build_cpu_s.values()), 1),
                                                            "bytes": sum(disk.values())},
                        "merge (inputs + labels)": {name: design["merge"][name]
                                                    for name in ("build_s", "build_cpu_s", "bytes")}},
    }
    out = out or Path("bench/results") / f"joint_merge_{name}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    typer.run(main)
