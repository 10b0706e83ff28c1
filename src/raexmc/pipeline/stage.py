"""What every stage script shares: error reporting, params loading and MLflow logging."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import typer

from ..errors import RaexmcError
from ..params import Params, load_params
from .tracking.run import StageRun, stage_run


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn a RaexmcError into one line on stderr and exit status 2."""
    try:
        yield
    except RaexmcError as exc:
        print(exc.one_line(), file=sys.stderr)
        raise typer.Exit(2) from None


def run_stage(name: str, body: Callable[[Params, StageRun], None], params_path: str = "params.yaml") -> None:
    """Load params, open the pipeline's MLflow run for stage `name` and run `body` inside it."""
    with user_errors():
        params = load_params(params_path)
        with stage_run(name, params_path) as run:
            body(params, run)


def stage_cli(main: Callable[..., None], description: str) -> None:
    """Run a stage script's `main` as a command whose --help is the script's docstring."""
    app = typer.Typer(add_completion=False)
    app.command(help=description)(main)
    app()
