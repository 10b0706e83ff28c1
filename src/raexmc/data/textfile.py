"""Reading text files with errors that name the file and line."""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Iterator
from pathlib import Path

from ..errors import DataError


def require_file(path: str | os.PathLike) -> Path:
    path = Path(path)
    if not path.is_file():
        raise DataError("file not found", path)
    return path


def read_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """(line number, line) of a UTF-8 text file, gzipped if it ends in .gz; an invalid byte or a corrupt gzip
    stream is reported with its line."""
    path = require_file(path)
    opener = gzip.open if path.suffix == ".gz" else open
    line_no = 0
    try:
        with opener(path, "rb") as handle:
            for line_no, raw in enumerate(handle, start=1):
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise DataError(f"invalid UTF-8 at byte {exc.start}", path, line_no) from None
                yield line_no, text.rstrip("\r\n")
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise DataError(f"corrupt gzip data ({exc})", path, line_no + 1) from None
