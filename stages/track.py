"""Log the pipeline's result files into this execution's MLflow run, whatever DVC did to make
them: a stage restored from DVC's run cache (same deps and params as an earlier run) does not
run and logs nothing, so this stage (always run) logs the dataset stats, the evaluation metrics
and the significance report of each such stage, under the names that stage uses; and the dataset folder as the
run's dataset input. With `package.register`, where the package or evaluate stage ran in this execution, it logs the
model folder as an MLflow pyfunc model into the run, which now carries the folder's evaluation, and registers it under
`package.model_name`, with the alias `package.alias` for a `dvc repro` of the workspace and the experiment's name for a
DVC experiment. Last, it prints the run's headline (`raexmc results`): the settings chosen and each method's key
metrics, and the MLflow UI's link to the runs table of every run, the end of what `dvc repro` shows."""

from raexmc.numerics import pin_cpu_kernels

pin_cpu_kernels()  # first: NumPy and PyTorch choose their CPU kernels as they load (docs/reproducibility.md)

from pathlib import Path

import typer

from raexmc.evaluation.significance import logged_summary
from raexmc.io import read_json
from raexmc.pipeline.results import summary
from raexmc.pipeline.tracking.identity import experiment_name
from raexmc.pipeline.tracking.run import view_url
from raexmc.pipeline.tracking.stage import stage_cli, tracked_stage


def main(dataset: Path = typer.Option(..., help="Dataset folder written by the download stage."),
         eval: Path = typer.Option(..., help="Evaluation folder written by the evaluate stage."),
         significance: Path = typer.Option(..., help="significance.json written by the significance stage."),
         selection: Path = typer.Option(..., help="selection.json written by the tune stage."),
         predictor: Path = typer.Option(..., help="Model folder written by the package stage: the model registered."),
         params: Path = typer.Option(Path("params.yaml"), help="Parameters file.")) -> None:
    with tracked_stage("track", params) as (p, run):
        run.dataset(dataset, dataset.resolve().name, "training")  # the folder is data/<data.name>
        ran = run.stages_run()
        for stage, path in (("download", dataset / "stats.json"), ("evaluate", eval / "metrics.json"),
                            ("significance", significance)):
            if stage in ran:  # it logged these itself
                continue
            values = read_json(path)
            run.for_stage(stage).metrics(logged_summary(values) if stage == "significance" else values)
            run.for_stage(stage).artifact(path)
        if p.package.registers and ran & {"package", "evaluate"}:  # a new folder, or its new measurement
            from raexmc.pipeline.serving import log_predictor, registered_name

            run.params({"package": p.package.model_dump(by_alias=True)})
            # `dvc repro` moves the alias that `raexmc serve` uses; an experiment gets its own name as
            # alias, so a sweep does not change what is served (`raexmc serve --alias <experiment>`).
            experiment = experiment_name()
            alias = p.package.alias if experiment == "workspace" else experiment
            uri = log_predictor(run.run_id, predictor, registered_name(p.package, dataset.name), alias)
            serve = "raexmc serve" if experiment == "workspace" else f"raexmc serve --alias {alias}"
            typer.echo(f"registered {uri}; serve it with `{serve}`", err=True)
    print(summary(eval, significance, selection))
    print(f"MLflow (`mlflow ui`): {view_url()}")


if __name__ == "__main__":
    stage_cli(main, __doc__)
