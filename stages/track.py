"""Log the pipeline's result files into this execution's MLflow run, whatever DVC did to make
them: a stage restored from DVC's run cache (same deps and params as an earlier run) does not
run and logs nothing, so this stage (always run) logs the dataset stats, the evaluation metrics
and the significance report of each such stage, under the names that stage uses; and the dataset folder as the
run's dataset input. Last, it prints the run's headline (`raexmc results`): the settings chosen and each method's key
metrics, the end of what `dvc repro` shows."""

from raexmc.numerics import pin_cpu_kernels

pin_cpu_kernels()  # first: NumPy and PyTorch choose their CPU kernels as they load (docs/reproducibility.md)

from pathlib import Path

import typer

from raexmc.evaluation.significance import logged_summary
from raexmc.io import read_json
from raexmc.pipeline.results import summary
from raexmc.pipeline.tracking.stage import stage_cli, tracked_stage


def main(dataset: Path = typer.Option(..., help="Dataset folder written by the download stage."),
         eval: Path = typer.Option(..., help="Evaluation folder written by the evaluate stage."),
         significance: Path = typer.Option(..., help="significance.json written by the significance stage."),
         selection: Path = typer.Option(..., help="selection.json written by the tune stage."),
         params: Path = typer.Option(Path("params.yaml"), help="Parameters file.")) -> None:
    with tracked_stage("track", params) as (_, run):
        run.dataset(dataset, dataset.resolve().name, "training")  # the folder is data/<data.name>
        ran = run.stages_run()
        for stage, path in (("download", dataset / "stats.json"), ("evaluate", eval / "metrics.json"),
                            ("significance", significance)):
            if stage in ran:  # it logged these itself
                continue
            values = read_json(path)
            run.for_stage(stage).metrics(logged_summary(values) if stage == "significance" else values)
            run.for_stage(stage).artifact(path)
    print(summary(eval, significance, selection))


if __name__ == "__main__":
    stage_cli(main, __doc__)
