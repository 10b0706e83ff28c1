"""Score the packaged model, the folder `raexmc predict` and `raexmc serve` load, on the test set through its own search
and scoring: RAE at the settings it holds, its λ and b sweeps and optionally OvA+kNN; the dual encoder and kNN (at
its own τ where tune chose one) search the index stage's indexes, each at its own depth. A chunk of test inputs at a
time is measured, so memory does not grow with them. Writes metrics.json, per-instance metrics and plots, and with
--scores each method's top-100 scores (score files)."""

from raexmc.numerics import pin_cpu_kernels

pin_cpu_kernels()  # first: NumPy and PyTorch choose their CPU kernels as they load (docs/reproducibility.md)

from pathlib import Path

import numpy as np
import typer

from raexmc.data.dataset import Dataset
from raexmc.encoder.vectors import load_embeddings
from raexmc.errors import DataError
from raexmc.evaluation.model_search import measure_model, served_model
from raexmc.evaluation.propensity import chosen_propensity
from raexmc.evaluation.selection_file import read_selection
from raexmc.memory.indexes import load_joint_search, memory_backend, search_device
from raexmc.memory.keys_values import memory_keys
from raexmc.pipeline.evaluation_folder import LOGGED, write_evaluation, write_scores
from raexmc.pipeline.tracking.stage import stage_cli, tracked_stage
from raexmc.rae.model import RaeModel


def main(dataset: Path = typer.Option(..., help="Dataset folder written by the download stage."),
         embeddings: Path = typer.Option(..., help="Embeddings folder written by the embed stage."),
         index: Path = typer.Option(..., help="Index folder written by the index stage."),
         tune: Path = typer.Option(..., help="Folder with the tune stage's selection.json."),
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
        served = served_model(predictor, rae, device)  # on the CPU, where a GPU's exact search is not the served one
        queries = np.asarray(load_embeddings(embeddings, "test"), dtype=np.float32)
        if len(queries) != data.size("test"):
            raise DataError(f"{len(queries)} test embeddings for {data.size('test')} test inputs: rerun embed",
                            embeddings / "test.npy")
        keys = memory_keys(embeddings) if memory_backend(index) == "exact" else None  # that backend keeps none
        baselines = load_joint_search(index, keys, p.infer.ef_search, device=device)
        measured, result, queries_per_s = measure_model(
            rae, data, queries, p, propensity, knn_tau=selection.knn_tau, baselines=baselines,
            served=served, chunk=chunk or None, progress=True, keep_scores=scores is not None)
        del baselines, keys, rae, served  # the indexes, before the outputs are written
        chosen = {"lambda": selection.lam, "tau": selection.tau, "metric": selection.metric, "auto": selection.auto}
        run.params({"selection": {**chosen, "retrieval": selection.retrieval,
                                  **({} if selection.label_share is None else {"label_share": selection.label_share})}})
        metrics = {**measured, "selection": {**chosen, "validation": {
            "chosen": selection.val_value, "fixed": selection.fixed_val_value}}}
        write_evaluation(out, metrics, result, selection)
        if scores is not None:
            write_scores(scores, result["scores"])
        # a timing goes to MLflow alone: in an output file it would change the file, and dvc.lock, every run
        run.metrics({**metrics, "retrieval": {**metrics["retrieval"], "queries_per_s": queries_per_s}})
        run.artifact(*(out / name for name in LOGGED))

if __name__ == "__main__":
    stage_cli(main, __doc__)
