"""What every stage script shares: one-line errors, the `with tracked_stage(...)` its work runs in (params,
lock, MLflow run), and the torchrun relaunch of the stages that run as several processes (train, embed)."""

from __future__ import annotations

import errno
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer

from ...errors import RaexmcError, StorageError
from ...io import NO_ROOM, remove_dead_temps
from ...numerics import kernels_pinned
from ...settings import Settings, load_settings, read_params_tree, settings_from
from .guard import ParamsGuard, one_stage_at_a_time
from .identity import output_folders
from .run import StageRun, stage_run

# Set by relaunch_under_torchrun for its workers: the folder where a rank leaves its one-line user error, which the
# launcher prints once (instead of every rank printing it beside torchrun's failure report).
RANK_ERRORS = "RAEXMC_RANK_ERRORS"
DENIED = (errno.EACCES, errno.EPERM, errno.EROFS)  # permissions, or a file system mounted read-only


@contextmanager
def user_errors(params_path: str | os.PathLike | None = None) -> Iterator[None]:
    """A RaexmcError, a write with no room or a write refused as one line on stderr, exit status 2; an error about
    a parameter names `params_path`."""
    try:
        try:
            yield
        except OSError as exc:
            if exc.errno not in (*NO_ROOM, *DENIED):
                raise
            raise _storage_error(exc) from None
    except RaexmcError as exc:
        exc = exc if params_path is None else exc.in_params_file(params_path)
        folder = os.environ.get(RANK_ERRORS)
        if folder and "RANK" in os.environ:
            (Path(folder) / f"rank{int(os.environ['RANK']):06d}").write_text(exc.one_line())
        else:
            print(exc.one_line(), file=sys.stderr)
        raise typer.Exit(2) from None


def _storage_error(exc: OSError) -> StorageError:
    path = exc.filename or "(file not reported)"
    if exc.errno in DENIED:  # reading an input may be refused too; a read-only file system refuses writes only
        return StorageError(f"{exc.strerror}: give this user access to it, or write the outputs where this user may "
                            "write (not on a file system mounted read-only), and rerun", path)
    fix = ("write it where files this large are allowed, or raise the file-size limit (ulimit -f)"
           if exc.errno == errno.EFBIG else "free some space and rerun")
    return StorageError(f"{exc.strerror} while writing: {fix} (outputs are written to temporary names first, so "
                        "nothing half-written was kept)", path)


@contextmanager
def tracked_stage(name: str, params_path: str | os.PathLike = "params.yaml",
                  is_main: bool = True) -> Iterator[tuple[Settings, StageRun | RankRun]]:
    """The settings and the MLflow run of stage `name`, run alone in its working copy with the params its DVC
    command set (guard.py), after removing killed stages' temporaries (a stage DVC restores never cleans up its
    own). A torchrun rank other than 0 (`is_main` false) only loads the settings and logs nothing."""
    with user_errors(params_path):
        if not is_main:
            yield load_settings(params_path), RankRun()
            return
        guard = ParamsGuard(params_path)
        tree = read_params_tree(params_path)
        settings = settings_from(tree, params_path)
        with one_stage_at_a_time(params_path, name):
            for folder in output_folders(params_path):
                remove_dead_temps(folder)
            guard.check()
            guard.check_dvc_overrides(tree)
            with stage_run(name, guard) as run:
                yield settings, run


class RankRun:
    """The run of a torchrun rank other than 0: rank 0 logs for the whole group, so this logs nothing."""

    def _nothing(self, *args: Any, **kwargs: Any) -> None:
        pass

    params = metrics = artifact = _nothing


def process_count(setting: int | str) -> int:
    """A `*.nproc` setting as a number: 'auto' is one per visible GPU (at least 1)."""
    if setting == "auto":
        import torch  # only the stages that can start processes pay for it

        return max(torch.cuda.device_count(), 1)
    return int(setting)


def relaunch_under_torchrun(nproc: int, torchrun_args: str) -> None:
    """Rerun this command as `nproc` torchrun workers per node and exit (0, 2 with the first failed rank's one line,
    else 1), where there are several processes or nodes and this is no worker yet; else return."""
    extra = torchrun_args.split()
    if (nproc > 1 or extra) and "LOCAL_RANK" not in os.environ:
        raise typer.Exit(torchrun([f"--nproc_per_node={nproc}", *extra, *sys.argv]))


def torchrun(args: list[str]) -> int:
    """torchrun's launcher in this process, so a rank's user error ends it in one line, status 2 (not a traceback)."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    elastic_log = logging.getLogger("torch.distributed.elastic")
    with tempfile.TemporaryDirectory(prefix="raexmc-ranks-") as folder:
        os.environ[RANK_ERRORS], level = folder, elastic_log.level
        elastic_log.setLevel(logging.CRITICAL)  # its warnings and errors repeat what the report below says
        try:
            run(get_args_parser().parse_args(args))
            return 0
        except ChildFailedError as failed:
            errors = sorted(Path(folder).iterdir())
            print(errors[0].read_text() if errors else str(failed), file=sys.stderr)
            return 2 if errors else 1
        finally:
            del os.environ[RANK_ERRORS]
            elastic_log.setLevel(level)


def stage_cli(main: Callable[..., None], description: str) -> None:
    """Run a stage's `main` with the script's docstring as --help, once it has pinned its CPU kernels."""
    if not kernels_pinned():
        raise RuntimeError("a stage script must call raexmc.numerics.pin_cpu_kernels() before anything else")
    app = typer.Typer(add_completion=False, rich_markup_mode=None)  # as raexmc's: a flag without "<bool>"
    app.command(help=description)(main)
    app()
