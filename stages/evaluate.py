"""Score the packaged model, the folder `raexmc predict` and `raexmc serve` load, on the test set through its own
search and scoring: RAE at the λ, τ, b and retrieval (joint, or split at a label share) it holds, with its memory's
values and prior; its λ and b sweeps (each b the model's own retrieval at that b), RAE with the tune stage's per-query
λ model (rae_query_lambda) and optionally the paper's OvA+kNN ablation. The two baselines search the index stage's
indexes, each at its own depth: the dual encoder (label keys alone) and kNN (training-input keys alone, at its own τ
where the tune stage chose one, metrics.json's knn.tau). A chunk of test inputs at a time is searched, scored and
measured before the next, so memory does not grow with them. Writes metrics.json, per-instance metrics and plots
(the λ sweep on test beside validation's), and with --scores each method's test-set top-100 scores (score files)."""

from raexmc.numerics import pin_cpu_kernels

pin_cpu_kernels()  # first: NumPy and PyTorch choose their CPU kernels as they load (docs/reproducibility.md)

from pathlib import Path

import numpy as np
import typer

from raexmc.data.dataset import Dataset
from raexmc.encoder.vectors import load_embeddings
from raexmc.errors import DataError
from raexmc.evaluation.evaluator import Evaluator
from raexmc.evaluation.methods import KNN_B, baseline_depth, evaluate_retrieval
from raexmc.evaluation.model_search import ModelSearch
from raexmc.evaluation.propensity import chosen_propensity
from raexmc.evaluation.selection_file import read_selection
from raexmc.memory.hnsw import resolve_threads
from raexmc.memory.indexes import load_joint_search, memory_backend, search_device
from raexmc.memory.keys_values import memory_keys, training_values
from raexmc.pipeline.evaluation_folder import LOGGED, write_evaluation, write_scores
from raexmc.pipeline.tracking.stage import stage_cli, tracked_stage
from raexmc.rae.model import RaeModel
from raexmc.rae.query_lambda import QUERY_LAMBDA_FILE, read_query_lambda


def main(dataset: Path = typer.Option(..., help="Dataset folder written by the download stage."),
         embeddings: Path = typer.Option(..., help="Embeddings folder written by the embed stage."),
         index: Path = typer.Option(..., help="Index folder written by the index stage."),
         tune: Path = typer.Option(..., help="Folder with the tune stage's selection.json and query_lambda.json."),
         predictor: Path = typer.Option(..., help="Model folder written by the package stage: the model measured."),
         out: Path = typer.Option(..., help="Evaluation folder to write."),
         scores: Path = typer.Option(None, help="Folder to write each method's test-set top-100 scores to, "
                                                "<method>.npz (a score file: raexmc evaluate --scores reads it)."),
         params: Path = typer.Option(Path("params.yaml"), help="Parameters file."),
         chunk: int = typer.Option(0, min=0, help="Test queries searched and scored at once (0: as many as about "
                                                  "256 MB of scores hold); the outputs are the same for any.")) -> None:
    with tracked_stage("evaluate", params) as (p, run):
        run.params({"infer": p.infer.model_dump(by_alias=True), "evaluate": p.evaluate.model_dump(),
                    "search": p.search.model_dump()})
        data, selection = Dataset(dataset), read_selection(tune)
        propensity = chosen_propensity(p.evaluate.propensity, data.names)
        typer.echo(propensity.line(), err=True)
        run.params({"propensity": propensity.record()})
        device = search_device(p.search)  # where an exact index searches; a graph searches on the CPU
        rae = RaeModel.load(predictor, device, needs=("search",))
        memory_summary = rae.about.get("memory", {})  # what the package stage recorded of the memory it holds
        lam = rae.settings.lam.fallback if rae.settings.per_query else rae.settings.lam  # the headline's: a number
        query_lambda = read_query_lambda(tune / QUERY_LAMBDA_FILE, rae.settings.tau, rae.settings.b)
        queries = np.asarray(load_embeddings(embeddings, "test"), dtype=np.float32)
        keys = memory_keys(embeddings) if memory_backend(index) == "exact" else None  # that backend keeps none
        baselines = load_joint_search(index, keys, p.infer.ef_search, device=device)
        Y_values = training_values(data.label_matrix("train"), p.infer.relevance, copy=False)
        evaluator = Evaluator(Y_values, data.label_matrix("test"), data.filter_matrix("test"), propensity.ab,
                              rae.values)
        if len(queries) != evaluator.num_queries:
            raise DataError(f"{len(queries)} test embeddings for {evaluator.num_queries} test inputs: rerun embed",
                            embeddings / "test.npy")
        search = ModelSearch(rae, baselines, queries, p.infer.b_sweep, baseline_depth(evaluator.exclude))
        result = evaluate_retrieval(search.in_blocks(), evaluator, rae.at(lam=lam), p.infer.lambda_sweep,
                                    p.infer.b_sweep, selection.knn_tau, KNN_B,
                                    with_ova_knn=p.infer.ova_knn, query_lambda=query_lambda,
                                    chunk=chunk or None, progress=True,
                                    workers=resolve_threads(p.evaluate.threads),
                                    keep_scores=scores is not None)
        queries_per_s, depth = search.queries_per_s(), {"depth": search.depth, "baseline_depth": search.baseline_depth}
        del search, baselines, keys, rae  # the indexes, before the outputs are written
        methods = result["methods"]
        chosen = {"lambda": selection.lam, "tau": selection.tau, "metric": selection.metric, "auto": selection.auto}
        run.params({"selection": {**chosen, "retrieval": selection.retrieval,
                                  **({} if selection.label_share is None else {"label_share": selection.label_share})}})
        metrics = {**methods, "knn": {**methods["knn"], "tau": selection.knn_tau},
                   "selection": {**chosen, "validation": {
                       "chosen": selection.val_value, "fixed": selection.fixed_val_value}},
                   "memory": memory_summary, "propensity": propensity.record(),
                   "query_lambda": {"uses_model": int(query_lambda.uses_model), "fallback": query_lambda.fallback},
                   "retrieval": depth}
        write_evaluation(out, metrics, result, selection)
        if scores is not None:
            write_scores(scores, result["scores"])
        # a timing goes to MLflow alone: in an output file it would change the file, and dvc.lock, every run
        run.metrics({**metrics, "retrieval": {**metrics["retrieval"], "queries_per_s": queries_per_s}})
        for name in LOGGED:
            run.artifact(out / name)


if __name__ == "__main__":
    stage_cli(main, __doc__)
