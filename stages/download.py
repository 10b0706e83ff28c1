"""Build the normalised dataset folder (texts, CSR label matrices, filters, stats.json) of the
dataset named by `data.name`, from the source its catalogue entry datasets/<name>.yaml configures."""

from raexmc.numerics import pin_cpu_kernels

pin_cpu_kernels()  # first: NumPy and PyTorch choose their CPU kernels as they load (docs/reproducibility.md)

from pathlib import Path

import typer

from raexmc.data.catalogue import dataset_spec
from raexmc.data.sources import build_dataset
from raexmc.pipeline.tracking.stage import stage_cli, tracked_stage


def main(out: Path = typer.Option(..., help="Dataset folder to write, e.g. data/foldoc."),
         params: Path = typer.Option(Path("params.yaml"), help="Parameters file.")) -> None:
    with tracked_stage("download", params) as (p, run):
        name, spec = dataset_spec(p, params)
        mirror = p.data.debian_mirror
        run.params({"data.name": name, "data.xc_repo_url": p.data.xc_repo_url, "data.debian_mirror": mirror,
                    f"datasets.{name}": spec})
        stats = build_dataset(name, spec, out, p.data.xc_repo_url, mirror)
        empty = stats["inputs_without_labels"]
        typer.echo(f"{name}: {stats['N_train']} train inputs, {stats['N_test']} test inputs, {stats['L']} labels; "
                   f"inputs without labels (kept): {empty['train']} of {stats['N_train']} train, "
                   f"{empty['test']} of {stats['N_test']} test", err=True)
        run.metrics(stats)
        run.artifact(out / "stats.json", out / "source.json")


if __name__ == "__main__":
    stage_cli(main, __doc__)
