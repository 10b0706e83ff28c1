"""SIGTERM as an exception, so that a killed stage still closes its MLflow run."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Terminated(BaseException):
    """SIGTERM as an exception, so that a killed stage still closes its MLflow run."""


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """Without this a `kill` (or torchrun stopping its workers) leaves the run RUNNING forever."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_terminated(signum, frame):
        raise Terminated

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
