"""Package the pipeline for prediction: write the memory folder (inference settings with the λ and τ
the tune stage chose, Y_train, label texts, the tune stage's per-query λ model, used when
`infer.query_lambda` is true) that `raexmc predict` reads beside the encoder and the index, and log the three as an MLflow pyfunc model registered under `package.model_name`, with the alias `package.alias`
for a `dvc repro` of the workspace and the experiment's name for a DVC experiment."""

from pathlib import Path

import typer

from raexmc.data.dataset import Dataset
from raexmc.evaluation.selection import read_selection
from raexmc.memory.keys_values import memory_keys, write_memory
from raexmc.pipeline.stage import run_stage, stage_cli
from raexmc.pipeline.tracking.identity import experiment_name
from raexmc.rae.query_lambda import QUERY_LAMBDA_FILE, read_query_lambda


def main(dataset: Path = typer.Option(..., help="Dataset folder written by the download stage."),
         model: Path = typer.Option(..., help="Encoder folder written by the train stage."),
         embeddings: Path = typer.Option(..., help="Embeddings folder (keys, for an exact index)."),
         index: Path = typer.Option(..., help="Index folder written by the index stage."),
         tune: Path = typer.Option(..., help="Folder with the tune stage's selection.json and query_lambda.json."),
         out: Path = typer.Option(..., help="Memory folder to write."),
         params: Path = typer.Option(Path("params.yaml"), help="Parameters file.")) -> None:
    def body(p, run) -> None:
        run.params({"package": p.section("package")})
        selection = read_selection(tune)
        settings = {"lambda": selection["lambda"], "b": p.typed("infer.b", int),
                    "tau": selection["tau"], "ef_search": p.typed("infer.ef_search", int),
                    "relevance": p.typed("infer.relevance", str), "input_max_len": p.typed("tokenize.input_max_len", int),
                    "input_fields": p.typed("tokenize.input_fields", str), "dataset": dataset.name,
                    "query_lambda": p.typed("infer.query_lambda", bool)}
        read_query_lambda(tune / QUERY_LAMBDA_FILE).check_settings(settings["tau"], settings["b"], tune / QUERY_LAMBDA_FILE)
        exact = p.typed("index.backend", str) == "exact"  # that backend keeps no keys: the memory does
        write_memory(out, Dataset(dataset), settings, memory_keys(embeddings) if exact else None,
                     copies=(tune / QUERY_LAMBDA_FILE,))
        if p.typed("package.register", bool):
            from raexmc.pipeline.serving import log_predictor, registered_name

            name = registered_name(p, dataset.name)
            # `dvc repro` moves the alias that `raexmc serve` uses; an experiment gets its own name as
            # alias, so a sweep does not change what is served (`raexmc serve --alias <experiment>`).
            experiment = experiment_name()
            alias = p.typed("package.alias", str) if experiment == "workspace" else experiment
            uri = log_predictor(run.run_id, model, index, out, name, alias)
            typer.echo(f"registered {uri}; serve it with `raexmc serve`", err=True)

    run_stage("package", body, str(params))


if __name__ == "__main__":
    stage_cli(main, __doc__)
