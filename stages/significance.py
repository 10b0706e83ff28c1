"""Paired t-tests of per-instance metrics between RAE and its baselines (and another run), and the headline
rows `dvc metrics show` reads; here, not in evaluate, so evaluate's outputs are all cached for DVC's run cache.
"""

from raexmc.numerics import pin_cpu_kernels

pin_cpu_kernels()  # first: NumPy and PyTorch choose their CPU kernels as they load (docs/reproducibility.md)

from pathlib import Path

import typer

from raexmc.evaluation.significance import PER_INSTANCE_ARTIFACT, compare_runs, load_per_instance, logged_summary
from raexmc.io import read_json, write_json
from raexmc.pipeline.compare import local_copy
from raexmc.pipeline.results import method_rows, p_value_rows, write_rows
from raexmc.pipeline.tracking.stage import stage_cli, tracked_stage


def main(eval: Path = typer.Option(..., help="Evaluation folder written by the evaluate stage."),
         out: Path = typer.Option(..., help="significance.json to write."),
         headline: Path = typer.Option(..., help="Folder to write the headline rows into (what `dvc metrics "
                                                 "show` reads)."),
         params: Path = typer.Option(Path("params.yaml"), help="Parameters file.")) -> None:
    with tracked_stage("significance", params) as (p, run):
        run.params({"significance": p.significance.model_dump()})
        metrics, other = list(p.significance.metrics), p.significance.compare_with
        baseline = None if other is None else load_per_instance(local_copy(str(other), PER_INSTANCE_ARTIFACT))
        report = compare_runs(load_per_instance(eval / "per_instance.npz"), metrics, baseline,
                              run_origin=eval / "per_instance.npz", other_origin=str(other))
        write_json(out, report)
        write_rows(headline, {**method_rows(read_json(eval / "metrics.json")), **p_value_rows(report)})
        run.metrics(logged_summary(report))
        run.artifact(out)


if __name__ == "__main__":
    stage_cli(main, __doc__)
