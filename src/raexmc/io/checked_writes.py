"""Checked writes: a library's unchecked file is checked for its size before it is renamed into place,
and a memory-mapped output is reserved on disk first (a full disk an error, not a SIGBUS).
"""

from __future__ import annotations

import errno
import math
import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from numpy.typing import DTypeLike

NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
"""A write the storage has no room for: a full disk or quota, or a file larger than the filesystem or the
process's file-size limit (`ulimit -f`) allows."""


def require_size(path: str | os.PathLike, expected: int) -> None:
    """Check that `path` holds the `expected` bytes, or raise the OSError its writer swallowed (hnswlib's
    stream is unchecked, faiss only prints): EFBIG at this process's file-size limit, else ENOSPC."""
    size = os.stat(path).st_size
    if size == expected:
        return
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    code = errno.EFBIG if limit != resource.RLIM_INFINITY and size >= limit else errno.ENOSPC
    raise OSError(code, f"{os.strerror(code)} (only {size:,} of its {expected:,} bytes were written)", str(path))


class _CountedWrites:
    """A binary file for a library to write through: it counts the bytes written and keeps the first write
    error, which some libraries replace with their own (torch.save: a RuntimeError 'unexpected pos')."""

    def __init__(self, handle: BinaryIO):
        self._handle = handle
        self.count = 0
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            written = self._handle.write(data)
        except OSError as exc:
            self.error = self.error or exc
            raise
        self.count += written
        return written

    def flush(self) -> None:
        self._handle.flush()


@contextmanager
def checked_writes(handle: BinaryIO) -> Iterator[_CountedWrites]:
    """`handle`, a new binary file for a library that writes to a file object, every write through Python,
    which checks it; once flushed it must hold every byte (require_size)."""
    writes = _CountedWrites(handle)
    try:
        try:
            yield writes
        except Exception as exc:
            if writes.error is not None and writes.error is not exc:
                raise writes.error from None
            raise
        handle.flush()
    except OSError as exc:
        if exc.filename is None:  # write() and flush() do not name the file
            exc.filename = handle.name
        raise
    require_size(handle.name, writes.count)


@contextmanager
def written_through(path: str | os.PathLike) -> Iterator[_CountedWrites]:
    """A new file at `path` with checked writes (checked_writes)."""
    with open(path, "wb") as handle, checked_writes(handle) as writes:
        yield writes


def save_array(path: str | os.PathLike, array: np.ndarray) -> None:
    """np.save with checked writes: numpy writes a real file with fwrite and reports a short write with no errno
    (so not as a full disk), and leaves a failed final flush unreported."""
    with written_through(path) as handle:
        np.save(handle, array, allow_pickle=False)


def new_memmap(path: str | os.PathLike, dtype: DTypeLike, shape: tuple[int, ...]) -> np.memmap:
    """A new .npy memmap of `dtype` and `shape`, every byte reserved first: a store into space the disk lacks is
    a SIGBUS, not an exception; reserved, it is an OSError naming the file before any work."""
    path = Path(path)
    dtype = np.dtype(dtype)
    try:
        array = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)  # a header, then a hole
        with open(path, "r+b") as handle:
            _reserve(handle, array.offset, path.stat().st_size)
    except OSError as exc:
        needed = dtype.itemsize * math.prod(shape)
        raise OSError(exc.errno, f"{exc.strerror} (the array needs {needed:,} bytes)", str(path)) from None
    return array


def _reserve(handle: BinaryIO, start: int, end: int) -> None:
    """Allocate bytes [start, end) of an open file: with posix_fallocate where the system and the
    filesystem have it, else by writing them (as zeros, which a new file holds there anyway)."""
    if end <= start:
        return
    fallocate = getattr(os, "posix_fallocate", None)  # not on macOS
    if fallocate is not None:
        try:
            fallocate(handle.fileno(), start, end - start)
            return
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise
    zeros = bytes(1 << 20)
    handle.seek(start)
    for offset in range(start, end, len(zeros)):
        handle.write(zeros[:end - offset])
    handle.flush()
