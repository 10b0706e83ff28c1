"""The progress bar of every long loop: tqdm's on a terminal; in a log file a line of its own at most every
LOG_INTERVAL_S seconds, since a redraw in place never ends its line."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, TextIO

from tqdm import tqdm

LOG_INTERVAL_S = 30.0  # between two lines of a bar written to a log: two a minute, so one each minute at least


class LogLines:
    """tqdm's stream in a log: each redraw ("\\r" first, no newline) a line; a clearing redraw (blanks) nothing."""

    def __init__(self, stream: TextIO):
        self.stream = stream

    def write(self, text: str) -> None:
        line = text.replace("\r", "").rstrip()
        if line:
            self.stream.write(line + "\n")

    def flush(self) -> None:
        self.stream.flush()


def progress_bar(iterable: Iterable | None = None, **options: Any) -> tqdm:
    """tqdm on stderr; where that is no terminal, a line every LOG_INTERVAL_S seconds (checked at every update)."""
    stderr = sys.stderr
    if not stderr.isatty():
        options.update(file=LogLines(stderr), mininterval=LOG_INTERVAL_S, miniters=1)
    return tqdm(iterable, **options)
