"""One stage at a time per working copy, so that a second pipeline run in a workspace is refused.

DVC runs the stages of one `dvc repro` or `dvc exp run` one after another, so a stage that finds
another stage running in the same working copy belongs to a second run, which shares (and may
have rewritten) the first one's params.yaml. Queued and `--temp` experiments run in copies of the
project, each with its own `.dvc/tmp`, so they never meet this lock.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ...errors import ConcurrentRunError
from .guard import PARALLEL_HINT
from .identity import experiment_name
from .paths import working_copy

LOCK_FILE = Path(".dvc", "tmp", "raexmc-stage.lock")


@contextmanager
def one_stage_at_a_time(params_path: str | os.PathLike, stage: str) -> Iterator[None]:
    """Hold the working copy's stage lock while the body runs (nothing to hold outside a DVC project)."""
    root = working_copy(Path(params_path).resolve().parent)
    if root is None:
        yield
        return
    path = root / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another stage"
            raise ConcurrentRunError(f"{holder} is running in this workspace, and a second run here would "
                                     f"rewrite its params; {PARALLEL_HINT}", path) from None
        handle.truncate(0)
        handle.write(f"stage '{stage}' of {_execution()} (pid {os.getpid()})\n")
        handle.flush()
        yield  # the lock goes with the file's closing


def _execution() -> str:
    name = experiment_name()
    return "`dvc repro`" if name == "workspace" else f"experiment '{name}'"
