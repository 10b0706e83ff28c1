"""Evaluate's search on a GPU at a chosen shape (default LF-AmazonTitles-1.3M's: 2,248,619 training inputs, 1,305,265
labels, 970,237 test queries, 384 dims, b = 200): the exact search of the index stage's two key sets on the device
(TorchIndex), as the evaluate stage runs it (JointSearch.search_parts, then its merge), timed with and without
the merge of the two top-b on the CPU; and its answers against the CPU's ExactIndex on a sample of queries.

    python bench/gpu_search.py --out $OUT/gpu_search.json          # on a machine with a GPU

Seeded random unit vectors stand in for the embeddings (generated on the device: the search's time depends on the
shapes, not on the vectors). Needs torch, numpy and tqdm only (no hnswlib, MLflow or ruamel.yaml), so it runs on
an offline GPU machine as it is. Appends one row to --out.
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path

import numpy as np
import torch
import typer

from raexmc.memory.exact import ExactIndex
from raexmc.memory.merge import JointSearch
from raexmc.memory.torch_index import TorchIndex


def unit_rows(n: int, dim: int, generator: torch.Generator, device: str) -> np.ndarray:
    rows = torch.randn(n, dim, generator=generator, device=device)
    return torch.nn.functional.normalize(rows, dim=1).cpu().numpy()


def agreement(got: tuple[np.ndarray, np.ndarray], want: tuple[np.ndarray, np.ndarray],
              tolerance: float = 1e-5) -> dict[str, float]:
    """How far the device's answers are from the CPU's: the largest score difference, the share of the CPU's
    top-b ids the device found, and the share of positions whose id differs where the CPU's score is apart
    from its neighbours' by more than twice the tolerance (0 when the two searches agree but for ties)."""
    (ids, sims), (want_ids, want_sims) = got, want
    gaps = np.abs(np.diff(want_sims, axis=1))
    apart = np.ones_like(want_sims, dtype=bool)
    apart[:, 1:] &= gaps > 2 * tolerance
    apart[:, :-1] &= gaps > 2 * tolerance
    found = np.mean([len(np.intersect1d(a, b)) / len(b) for a, b in zip(ids, want_ids)])
    return {"max_score_diff": float(np.abs(sims - want_sims).max()), "recall_of_cpu_top_b": round(float(found), 6),
            "id_mismatch_where_untied": float(np.mean(ids[apart] != want_ids[apart])),
            "untied_share": round(float(apart.mean()), 4)}


def main(out: Path = typer.Option(..., help="JSON file to append the row to."),
         train: int = typer.Option(2_248_619, help="Training inputs (the inputs' index)."),
         labels: int = typer.Option(1_305_265, help="Labels (the labels' index)."),
         queries: int = typer.Option(970_237, help="Test queries."),
         dim: int = typer.Option(384),
         b: int = typer.Option(200, help="Keys per query and key set (max of infer.b and b_sweep)."),
         check: int = typer.Option(256, help="Queries compared with the CPU's ExactIndex."),
         half: bool = typer.Option(True, help="fp16 products rescored in fp32 (--no-half: fp32 products)."),
         max_seconds: float = typer.Option(0, help="Stop searching after this many seconds (0: never); the rates "
                                                   "are over the queries searched by then."),
         device: str = typer.Option("cuda"), seed: int = typer.Option(0)) -> None:
    generator = torch.Generator(device=device).manual_seed(seed)
    started = time.perf_counter()
    key_sets = [unit_rows(n, dim, generator, device) for n in (train, labels)]
    query_rows = unit_rows(queries, dim, generator, device)
    made_s = time.perf_counter() - started

    started = time.perf_counter()
    joint = JointSearch(*(TorchIndex(keys, device, half=half) for keys in key_sets))
    on_gpu = device.startswith("cuda")
    if on_gpu:
        torch.cuda.synchronize()
    upload_s = time.perf_counter() - started
    block = joint.query_block
    joint.search_parts(query_rows[:block], b)  # warm-up: kernels and the allocator's cache

    search_s = merge_s = 0.0
    searched = 0
    for start in range(0, queries, block):
        if max_seconds and search_s + merge_s > max_seconds:
            break
        rows = query_rows[start:start + block]
        searched += len(rows)
        started = time.perf_counter()
        inputs, labels_hits = joint.search_parts(rows, b)
        search_s += time.perf_counter() - started
        started = time.perf_counter()
        joint.merge(inputs, labels_hits, b)
        merge_s += time.perf_counter() - started
    peak = torch.cuda.max_memory_allocated() / 2**30 if on_gpu else None

    sample = query_rows[:check]
    cpu = JointSearch(*(ExactIndex(keys) for keys in key_sets))
    got_inputs, got_labels = joint.search_parts(sample, b)
    want_inputs, want_labels = cpu.search_parts(sample, b)
    row = {"device": torch.cuda.get_device_name() if on_gpu else device, "torch": torch.__version__,
           "host": platform.node(),
           "shape": {"train": train, "labels": labels, "queries": queries, "dim": dim, "b": b}, "searched": searched,
           "half": half, "query_block": block, "blocks": {"inputs": joint.inputs.query_block,
                                                        "labels": joint.labels.query_block},
           "generate_s": round(made_s, 1), "upload_s": round(upload_s, 2), "search_s": round(search_s, 2),
           "merge_s": round(merge_s, 2), "search_queries_per_s": round(searched / search_s, 1),
           "search_and_merge_queries_per_s": round(searched / (search_s + merge_s), 1),
           "peak_gpu_gib": peak and round(peak, 2),
           "check": {"queries": check, "inputs": agreement(got_inputs, want_inputs),
                     "labels": agreement(got_labels, want_labels),
                     "joint": agreement(joint.merge(got_inputs, got_labels, b),
                                        cpu.merge(want_inputs, want_labels, b))}}
    print(json.dumps(row, indent=1), flush=True)
    rows = json.loads(out.read_text()) if out.is_file() else []
    out.write_text(json.dumps([*rows, row], indent=1) + "\n")


if __name__ == "__main__":
    typer.run(main)
