"""Package the pipeline for prediction: write the memory folder (inference settings with the λ, τ and retrieval
the tune stage chose and which memory RAE searches (memory.keep, method, prior, input keys), the values
(Y_train, or the memory stage's selected keys' values with their index and member counts; a compressed
memory's input keys' and labels' indexes), the labels' own ids and texts, the tune stage's per-query λ model, used when
`infer.query_lambda` is true) that `raexmc predict` reads beside the encoder and the index, and log the three as an MLflow pyfunc model registered under `package.model_name`, with the alias `package.alias`
for a `dvc repro` of the workspace and the experiment's name for a DVC experiment. Predict and serve search on
the CPU: where the index stage kept exact indexes for a GPU's search (`search.device`) and `index.backend` would
build graphs on the CPU, this stage builds those HNSW graphs into the memory folder, so an evaluation on the GPU
never waits for them."""

import tempfile
from pathlib import Path

import numpy as np
import typer

from raexmc.data.dataset import Dataset
from raexmc.evaluation.selection import rae_retrieval, read_selection
from raexmc.encoder.vectors import load_embeddings
from raexmc.memory.indexes import build_memory_indexes, memory_backend
from raexmc.memory.input_memory import InputMemory
from raexmc.memory.keys_values import memory_keys, training_values
from raexmc.memory.predictor_folder import write_memory
from raexmc.pipeline.stage import run_stage, stage_cli
from raexmc.pipeline.tracking.identity import experiment_name
from raexmc.rae.predictor import graphs_to_build
from raexmc.rae.query_lambda import QUERY_LAMBDA_FILE, read_query_lambda


def main(dataset: Path = typer.Option(..., help="Dataset folder written by the download stage."),
         model: Path = typer.Option(..., help="Encoder folder written by the train stage."),
         embeddings: Path = typer.Option(..., help="Embeddings folder (keys, for an exact index)."),
         index: Path = typer.Option(..., help="Index folder written by the index stage."),
         tune: Path = typer.Option(..., help="Folder with the tune stage's selection.json and query_lambda.json."),
         memory: Path = typer.Option(..., help="Memory folder written by the memory stage (RAE's input keys)."),
         out: Path = typer.Option(..., help="Memory folder to write."),
         params: Path = typer.Option(Path("params.yaml"), help="Parameters file.")) -> None:
    def body(p, run) -> None:
        run.params({"package": p.section("package")})
        selection = read_selection(tune)
        settings = {"lambda": selection["lambda"], "b": p.integer("infer.b", 1),
                    "tau": selection["tau"], "ef_search": p.integer("infer.ef_search", 1),
                    "relevance": p.typed("infer.relevance", str), "input_max_len": p.typed("tokenize.input_max_len", int),
                    "input_fields": p.typed("tokenize.input_fields", str), "dataset": dataset.name,
                    "query_lambda": p.typed("infer.query_lambda", bool),
                    "retrieval": rae_retrieval(selection).mode, "label_share": rae_retrieval(selection).label_share}
        read_query_lambda(tune / QUERY_LAMBDA_FILE).check_settings(settings["tau"], settings["b"], tune / QUERY_LAMBDA_FILE)
        rae_memory, data = InputMemory(memory), Dataset(dataset)
        settings["memory"] = rae_memory.summary()
        # predict and serve search on the CPU: the graphs the index stage did not build for a GPU's exact search
        graphs = graphs_to_build(index, memory, p.typed("index.backend", str), embeddings)
        keys, values, own = None, None, rae_memory.own_keys()
        if memory_backend(index) == "exact" and (own is not None or not graphs):  # exact keeps no keys: the memory does
            keys = memory_keys(embeddings) if own is None else np.vstack([own, load_embeddings(embeddings, "labels")])
        if not rae_memory.full:
            values = rae_memory.values(training_values(data.label_matrix("train"), settings["relevance"], copy=False))
        with tempfile.TemporaryDirectory(dir=out.parent) as scratch:
            built = Path(scratch) / "graphs"
            if graphs:
                build_memory_indexes(embeddings, built, "hnsw", key_sets=graphs, M=p.typed("index.M", int),
                                     ef_construction=p.typed("index.ef_construction", int),
                                     threads=p.integer("index.threads", 0))
            write_memory(out, data, settings, keys, values=values,
                         copies=(tune / QUERY_LAMBDA_FILE, *rae_memory.predictor_files(), *(built / k for k in graphs)))
        if p.typed("package.register", bool):
            from raexmc.pipeline.serving import log_predictor, registered_name

            name = registered_name(p, dataset.name)
            # `dvc repro` moves the alias that `raexmc serve` uses; an experiment gets its own name as
            # alias, so a sweep does not change what is served (`raexmc serve --alias <experiment>`).
            experiment = experiment_name()
            alias = p.typed("package.alias", str) if experiment == "workspace" else experiment
            uri = log_predictor(run.run_id, model, index, out, name, alias)
            serve = "raexmc serve" if experiment == "workspace" else f"raexmc serve --alias {alias}"
            typer.echo(f"registered {uri}; serve it with `{serve}`", err=True)

    run_stage("package", body, str(params))


if __name__ == "__main__":
    stage_cli(main, __doc__)
