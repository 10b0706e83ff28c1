"""The one progress bar of every loop that may run long: tqdm's on a terminal; elsewhere (a log file) a line
of its own at most every LOG_INTERVAL_S seconds, since a redraw in place never ends its line.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, TextIO

from tqdm import tqdm

LOG_INTERVAL_S = 30.0  # between two lines of a bar written to a log: two a minute, so one each minute at least


class LogLines:
    """A text stream for tqdm that writes each redraw as a line: tqdm starts a redraw with "\\r" and ends it with
    none; a clearing redraw (blanks only) writes nothing."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> None:
        line = text.replace("\r", "").rstrip()
        if line:
            self.stream.write(line + "\n")

    def flush(self) -> None:
        self.stream.flush()


def progress_bar(iterable: Iterable | None = None, **options: Any) -> tqdm:
    """tqdm(iterable, **options) on stderr; where stderr is no terminal, one line every LOG_INTERVAL_S seconds
    (checked at every update, so a slow loop is not skipped over) in place of the redraws."""
    stderr = sys.stderr
    if not stderr.isatty():
        options.update(file=LogLines(stderr), mininterval=LOG_INTERVAL_S, miniters=1)
    return tqdm(iterable, **options)
