"""Where evaluate's memory goes at a shape such as LF-AmazonTitles-1.3M's: resident memory after each of its
setup steps (imports, values, Evaluator, both graphs), then the peak while it scores the first QUERIES test
queries as the stage does (RAE, both baselines; two workers).

    PYTHONPATH=<checkout>/src python bench/evaluate_memory_probe.py data/synthetic-LF-AmazonTitles-1.3M \
        artifacts/synthetic-LF-AmazonTitles-1.3M --queries 40000

Prints one JSON object (MB of 1,024² bytes). Run it with the src of two commits to compare them; the README's
1.3M evaluate figures (graphs 2,976 MB as loaded, the import and block-size savings) come from it.
"""

from __future__ import annotations

import json
import resource
import threading
import time
from pathlib import Path

import typer

RESULTS: dict[str, float] = {}


def resident_mb() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize() >> 20


def main(dataset: Path = typer.Argument(..., help="A download stage's folder."),
         artifacts: Path = typer.Argument(..., help="The run's artifacts folder (embeddings, index, memory)."),
         queries: int = typer.Option(40_000, min=1, help="Test queries to score.")) -> None:
    from raexmc.data.dataset import Dataset
    from raexmc.encoder.vectors import load_embeddings
    from raexmc.evaluation.evaluator import BlockSearch, EvalSettings, Evaluator, Retrievals, evaluate_retrieval
    from raexmc.memory.indexes import load_joint_search
    from raexmc.memory.input_memory import InputMemory
    from raexmc.memory.keys_values import training_values

    RESULTS["imports_mb"] = resident_mb()
    data = Dataset(dataset)
    values = training_values(data.label_matrix("train"), "binary", copy=False)
    RESULTS["after_values_mb"] = resident_mb()
    evaluator = Evaluator(values, data.label_matrix("test")[:queries], data.filter_matrix("test")[:queries], (0.6, 2.6))
    RESULTS["after_evaluator_mb"] = resident_mb()
    graphs = load_joint_search(artifacts / "index", None, 300)
    memory = InputMemory(artifacts / "memory")
    RESULTS["after_graphs_mb"] = resident_mb()
    test = load_embeddings(artifacts / "embeddings", "test")[:queries]

    def search(rows: slice) -> Retrievals:
        joint, inputs, labels = memory.search(graphs, test[rows], 200, 200, 0.04, 300)
        return Retrievals(joint=joint, labels=labels, inputs=inputs)

    peak = [0]

    def watch() -> None:
        while True:
            peak[0] = max(peak[0], resident_mb())
            time.sleep(0.2)

    threading.Thread(target=watch, daemon=True).start()
    started = time.perf_counter()
    settings = EvalSettings(lam=0.5, b=200, tau=0.04, lambda_sweep=[0.5], b_sweep=[200])
    evaluate_retrieval(BlockSearch(search, graphs.query_block, len(test)), evaluator, settings, workers=2)
    RESULTS.update(scoring_peak_mb=peak[0], scoring_s=round(time.perf_counter() - started, 1), queries=len(test))
    typer.echo(json.dumps(RESULTS, indent=2))


if __name__ == "__main__":
    typer.run(main)
