"""Evaluate's scoring and ranking speed (queries per second) at a chosen label density, without an index:
seeded random retrievals and labels, every ranking evaluate makes (RAE, both baselines, OvA+kNN off, the
default λ and b sweeps), as one `evaluate_retrieval` call on `--workers` threads.

    python bench/evaluate_speed.py --tag after           # appends a row to bench/results/evaluate_speed.json
    RAEXMC_WORKERS=2 python bench/evaluate_speed.py --tag after --tune --train 200000 --labels 100000 --queries 10000

The default shape has LF-AmazonTitles-1.3M's density: 22.2 labels per training input, b = 200 keys a query
(two thirds of them inputs, as N / (N + L) there), so a query's RAE scores hold about 3,000 labels. Run it at
two commits (PYTHONPATH=<checkout>/src) to compare them: an equal `digest` (and `tune_digest`, the tune stage's curve
on those queries held out, with `--tune`) says the numbers are the same, only time differs.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import typer

from common import rerun_command
from raexmc.evaluation.evaluator import Evaluator
from raexmc.evaluation.methods import evaluate_retrieval
from raexmc.evaluation.retrievals import Retrievals
from raexmc.evaluation.selection import ValidationCurve
from raexmc.evaluation.validation_memory import HeldOutLabels, ValidationRetrieval
from raexmc.rae.model import RaeModel, RaeSettings

OUT = Path("bench/results/evaluate_speed.json")


def random_labels(rng: np.random.Generator, rows: int, labels: int, per_row: float) -> sp.csr_matrix:
    counts = rng.poisson(per_row, size=rows).clip(1, labels)
    cols = np.concatenate([rng.choice(labels, size=c, replace=False) for c in counts])
    indptr = np.concatenate([[0], np.cumsum(counts)])
    return sp.csr_matrix((np.ones(cols.size), cols, indptr), shape=(rows, labels))


def random_hits(rng: np.random.Generator, queries: int, keys: int, depth: int) -> tuple[np.ndarray, np.ndarray]:
    ids = np.stack([rng.choice(keys, size=depth, replace=False) for _ in range(queries)]).astype(np.int64)
    sims = -np.sort(-rng.uniform(0.2, 0.9, size=(queries, depth)).astype(np.float32), axis=1)
    return ids, sims


def digest(outputs: object) -> str:
    """The outputs' sha256 to every digit: rows at two commits with the same digest measured the same numbers."""
    return hashlib.sha256(json.dumps(outputs, sort_keys=True, default=str).encode()).hexdigest()[:16]


def main(tag: str = typer.Option(..., help="Names the row: the code measured (e.g. its commit)."),
         train: int = typer.Option(40_000, help="Training inputs (keys) N."),
         labels: int = typer.Option(20_000, help="Labels L."),
         queries: int = typer.Option(3_000, help="Test queries."),
         per_input: float = typer.Option(22.2, help="Mean labels per input."),
         b: int = typer.Option(200, help="Keys per query (infer.b)."),
         workers: int = typer.Option(1, help="Threads that rank side by side (evaluate.threads)."),
         tune: bool = typer.Option(False, help="Also time the tune stage's 11 λ x 5 τ curve, the queries held out."),
         seed: int = typer.Option(0)) -> None:
    rng = np.random.default_rng(seed)
    Y, Y_test = random_labels(rng, train, labels, per_input), random_labels(rng, queries, labels, per_input)
    evaluator = Evaluator(Y, Y_test, sp.csr_matrix((queries, labels), dtype=bool), (0.55, 1.5))
    found = Retrievals(joint=random_hits(rng, queries, train + labels, b), labels=random_hits(rng, queries, labels, b),
                       inputs=random_hits(rng, queries, train, b))
    rae = RaeModel(evaluator.rae_values, RaeSettings(0.5, 0.04, b))
    sweeps = [0, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 1], [10, 25, 50, 100, 200]  # the default λ and b sweeps
    started, cpu = time.perf_counter(), time.process_time()
    result = evaluate_retrieval(found.rows, evaluator, rae, *sweeps, workers=workers)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    row = {"tag": tag, "queries_per_s": round(queries / wall, 1), "wall_s": round(wall, 1),
           "cpu_s": round(cpu, 1), "rae_P@1": result["methods"]["rae"]["P@1"],
           "shape": {"train": train, "labels": labels, "queries": queries, "per_input": per_input, "b": b},
           "workers": workers, "digest": digest({k: result[k] for k in ("methods", "lambda_sweep", "b_sweep")})}
    if tune:  # the curve's threads: RAEXMC_WORKERS, as in the stage
        held = HeldOutLabels(Y_test, Y, evaluator.exclude, np.arange(queries), np.arange(train))
        curve = ValidationCurve(ValidationRetrieval(found.inputs, found.labels, b, held, Y), evaluator.propensity_ab)
        started = time.perf_counter()
        curve.measure([i / 10 for i in range(11)], [0.01, 0.02, 0.04, 0.08, 0.16], [None])
        row.update(tune_s=round(time.perf_counter() - started, 1), tune_digest=digest(curve.curve()))
    report = json.loads(OUT.read_text()) if OUT.is_file() else {"rows": []}
    report["rows"].append({**row, "command": rerun_command()})
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(row))


if __name__ == "__main__":
    typer.run(main)
