"""What every stage script shares: error reporting, params loading and MLflow logging."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import typer

from ..errors import RaexmcError, StorageError
from ..io import DISK_FULL
from ..params import Params, load_params
from .tracking.guard import ParamsGuard
from .tracking.run import StageRun, stage_run
from .tracking.workspace_lock import one_stage_at_a_time


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn a RaexmcError, or a full disk, into one line on stderr and exit status 2."""
    try:
        try:
            yield
        except OSError as exc:
            if exc.errno not in DISK_FULL:
                raise
            raise StorageError(f"{exc.strerror} while writing: free some space and rerun (outputs are written "
                               "to temporary names first, so nothing half-written was kept)",
                               exc.filename or "(file not reported)") from None
    except RaexmcError as exc:
        print(exc.one_line(), file=sys.stderr)
        raise typer.Exit(2) from None


def run_stage(name: str, body: Callable[[Params, StageRun], None], params_path: str = "params.yaml") -> None:
    """Load params, open the pipeline's MLflow run for stage `name` and run `body` inside it, alone
    in its working copy and only with the params its DVC command set (see tracking.guard)."""
    with user_errors():
        guard = ParamsGuard(params_path)
        params = load_params(params_path)
        with one_stage_at_a_time(params_path, name):
            guard.check()
            guard.check_dvc_overrides(params)
            with stage_run(name, params_path, guard) as run:
                body(params, run)


def stage_cli(main: Callable[..., None], description: str) -> None:
    """Run a stage script's `main` as a command whose --help is the script's docstring."""
    app = typer.Typer(add_completion=False)
    app.command(help=description)(main)
    app()
