"""The `raexmc` command: look at datasets and presets (the pipeline itself runs with `dvc repro`)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from .errors import ConfigError
from .params import load_params
from .stage import user_errors
from .tracking import flatten

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="RAE-XMC: extreme multi-label classification with retrieval-augmented encoders. "
                       "Run the pipeline with `dvc repro`; these commands inspect its datasets and presets.")

PARAMS = typer.Option(Path("params.yaml"), help="Parameters file.")


@app.command()
def datasets(params: Path = PARAMS, data_dir: Path = typer.Option(Path("data"), help="Where datasets are built.")) -> None:
    """List the datasets configured in params.yaml, their source, and their size once built."""
    with user_errors():
        catalogue = load_params(params).section("datasets")
        for name, spec in catalogue.items():
            stats_path = data_dir / name / "stats.json"
            built = "not built"
            if stats_path.is_file():
                stats = json.loads(stats_path.read_text())
                built = f"N_train={stats['N_train']} N_test={stats['N_test']} L={stats['L']}"
            typer.echo(f"{name:24} {spec.get('source', '?'):8} {built}")


@app.command()
def show(name: str = typer.Argument(..., help="Dataset name, e.g. foldoc."),
         data_dir: Path = typer.Option(Path("data"), help="Where datasets are built.")) -> None:
    """Print stats.json and source.json of a built dataset."""
    with user_errors():
        from .data.dataset import Dataset

        dataset = Dataset(data_dir / name)
        typer.echo(json.dumps({"stats": dataset.stats, "source": json.loads((dataset.folder / "source.json").read_text())},
                              indent=2))


@app.command()
def preset(name: str = typer.Argument(..., help="Preset name, e.g. LF-AmazonTitles-131K."), params: Path = PARAMS) -> None:
    """Print the `dvc exp run` command that applies one of the paper's hyper-parameter presets."""
    with user_errors():
        presets = load_params(params).section("presets")
        if name not in presets:
            raise ConfigError(f"unknown preset '{name}' (known: {', '.join(presets)})", params, "presets")
        values = flatten(presets[name])
        typer.echo("dvc exp run " + " ".join(f"-S '{k}={v}'" for k, v in values.items()))
if __name__ == "__main__":
    app()
