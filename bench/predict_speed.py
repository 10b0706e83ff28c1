"""Predict's speed with the paper's joint top-b against the split retrieval, on one packaged project: whether
choosing `infer.retrieval: split` costs the user time per query.

    python bench/predict_speed.py --name foldoc [--queries 1024 --batch-size 64 --repeats 3 --shares 0.25,0.5,0.75]

Loads artifacts/<name>/predictor as `raexmc predict` does (RaeModel.load), takes the first --queries test texts of
data/<name>, and runs RaeModel.predict over them in batches for the packaged model's own settings and for the
split retrieval at each share (the same memory, λ, τ and b; only the retrieval changes). The variants take turns
within each of --repeats passes, so that a busy machine slows them alike; each keeps its fastest pass. Writes
bench/results/predict_speed_<name>.json: per variant queries/s and the encode, search and score milliseconds per
query (rae/timing.py's split of predict).
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any

import typer

from common import rerun_command
from raexmc.data.dataset import Dataset
from raexmc.memory.merge import RaeRetrieval
from raexmc.rae.model import RaeModel
from raexmc.rae.timing import Timing


def measure(packaged: RaeModel, texts: list[str], shares: list[float], batch_size: int, repeats: int,
            k: int = 10) -> dict[str, dict[str, float]]:
    """Per variant ("packaged": the model as packaged; "split <share>"), its fastest pass of `repeats`, each asking
    for the top k labels (at most all of them)."""
    k = min(k, packaged.num_labels)  # as `raexmc predict` takes its default
    variants = {"packaged": packaged, **{f"split {share:g}": packaged.at(retrieval=RaeRetrieval("split", share))
                                         for share in shares}}
    best: dict[str, Timing] = {}
    for _, (name, model) in itertools.product(range(repeats), variants.items()):
        timing = Timing()  # one pass of predict over the texts, batch by batch, its time split as predict splits it
        for start in range(0, len(texts), batch_size):
            timing.add(model.predict(texts[start:start + batch_size], k)[1])
        if name not in best or timing.per_query_ms()["total"] < best[name].per_query_ms()["total"]:
            best[name] = timing
    return {name: {"queries_per_s": round(1000 / t.per_query_ms()["total"], 1),
                   **{f"{part}_ms_per_query": round(ms, 3) for part, ms in t.per_query_ms().items()}}
            for name, t in best.items()}


def main(name: str = "foldoc", root: Path = Path("."), queries: int = 1024, batch_size: int = 64, repeats: int = 3,
         shares: str = "0.25,0.5,0.75") -> None:
    model = RaeModel.load(root / "artifacts" / name / "predictor")
    texts = [model.query_text(record) for record in itertools.islice(Dataset(root / "data" / name).texts("test"),
                                                                      queries)]
    settings = model.settings
    report: dict[str, Any] = {
        "dataset": name, "command": rerun_command(),
        "queries": len(texts), "batch_size": batch_size, "repeats": repeats, "cpus": os.cpu_count(),
        "packaged": {"retrieval": settings.retrieval.mode, "label_share": settings.retrieval.label_share,
                     "lambda": settings.lam if not settings.per_query else "per query", "tau": settings.tau,
                     "b": settings.b},
        "variants": measure(model, texts, [float(s) for s in shares.split(",")], batch_size, repeats),
    }
    out = root / "bench" / "results" / f"predict_speed_{name}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    typer.run(main)
