"""Outputs written atomically and checked: whole or not at all, a killed writer's leftovers removed, a write error
naming the output (not its temporary), a library's unchecked file checked for its size, a memory-mapped output
reserved on disk first (a full disk an error, not a SIGBUS)."""

from __future__ import annotations

import errno
import json
import math
import os
import re
import resource
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from numpy.typing import DTypeLike

__all__ = ["NO_ROOM", "atomic_dir", "atomic_file", "checked_writes", "mark_empty", "new_memmap", "remove_dead_temps",
           "require_size", "save_array", "scratch_dir", "write_json", "writer_gone", "written_through"]

EMPTY_MARK = ".empty"  # .dvcignore names it
EMPTY_TEXT = "This run left this DVC output empty; DVC ignores this file (.dvcignore).\n"
_TEMP_NAME = re.compile(r"\..+\.(?P<pid>\d+)-[a-z0-9_]+\.tmp")  # _temp_beside's (tempfile's random part: a-z, 0-9, _)
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
    """A binary file that counts the bytes written and keeps the first write error, which some libraries replace
    with their own (torch.save: a RuntimeError 'unexpected pos')."""

    def __init__(self, handle: BinaryIO):
        self._handle, self.count = handle, 0
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
    """`handle` (a new binary file) for a library to write to, every write checked, then every byte (require_size)."""
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
    with open(path, "wb") as handle, checked_writes(handle) as writes:
        yield writes


def save_array(path: str | os.PathLike, array: np.ndarray) -> None:
    """np.save with checked writes: numpy reports a short fwrite with no errno and a failed final flush not at all."""
    with written_through(path) as handle:
        np.save(handle, array, allow_pickle=False)


def new_memmap(path: str | os.PathLike, dtype: DTypeLike, shape: tuple[int, ...]) -> np.memmap:
    """A new .npy memmap, every byte reserved first: past the disk's space a store is a SIGBUS, a reserve an OSError."""
    path, dtype = Path(path), np.dtype(dtype)
    try:
        array = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=shape)  # a header, then a hole
        with open(path, "r+b") as handle:
            _reserve(handle, array.offset, path.stat().st_size)
    except OSError as exc:
        needed = dtype.itemsize * math.prod(shape)
        raise OSError(exc.errno, f"{exc.strerror} (the array needs {needed:,} bytes)", str(path)) from None
    return array


def _reserve(handle: BinaryIO, start: int, end: int) -> None:
    """Allocate bytes [start, end) of an open file: posix_fallocate where there is one, else written zeros."""
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


def _temp_beside(target: Path, folder: bool) -> Path:
    """A new temporary folder or file `.<name>.<pid>-<random>.tmp` beside `target`: the writer's process id tells
    a leftover of a killed writer from the temporary of one still running."""
    target.parent.mkdir(parents=True, exist_ok=True)
    names = {"prefix": f".{target.name}.{os.getpid()}-", "suffix": ".tmp", "dir": target.parent}
    if folder:
        return Path(tempfile.mkdtemp(**names))
    fd, name = tempfile.mkstemp(**names)
    os.close(fd)
    return Path(name)


def _stale_temp(name: str, prefix: str) -> bool:
    """Whether `name` is a temporary of the target (`prefix` `.<name>.`) whose writer no longer runs; its tag
    holds no dot, so `<name>.json`'s is not `<name>`'s."""
    temp = re.fullmatch(rf"{re.escape(prefix)}(?P<tag>[^.]+)\.tmp", name)
    if temp is None:
        return False
    pid = temp["tag"].partition("-")[0]
    # a tag without a process id was named before temporaries carried one: its writer is long gone
    return not pid.isdigit() or writer_gone(int(pid))


def writer_gone(pid: int) -> bool:
    """Whether no process `pid` runs (a running process of another user counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # it runs, as another user
    return False


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _remove_leftovers(target: Path) -> None:
    """Remove a killed writer's temporary and the `.<name>.old` it set aside beside `target` (a running one's stays)."""
    if not target.parent.is_dir():
        return
    prefix = f".{target.name}."
    for sibling in target.parent.iterdir():
        if sibling.name == f"{prefix}old" or _stale_temp(sibling.name, prefix):
            _remove(sibling)


def remove_dead_temps(folder: str | os.PathLike) -> None:
    """Remove every dead writer's temporary under `folder` (a killed stage's output DVC restores is never rewritten)."""
    for parent, folders, files in os.walk(folder):
        for name in (*folders, *files):
            temp = _TEMP_NAME.fullmatch(name)
            if temp and writer_gone(int(temp["pid"])):
                _remove(Path(parent, name))
        folders[:] = [name for name in folders if not _TEMP_NAME.fullmatch(name)]


@contextmanager
def _output_temp(target: Path, folder: bool) -> Iterator[Path]:
    """A temporary beside `target` with an output's permissions (temporaries are created private), once a killed
    writer's leftovers are removed; on an exception removed, the error naming `target`."""
    _remove_leftovers(target)
    tmp = _temp_beside(target, folder)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, (0o777 if folder else 0o666) & ~umask)
    try:
        yield tmp
    except BaseException as exc:
        _remove(tmp)
        _name_the_output(exc, tmp, target)
        raise


@contextmanager
def atomic_dir(target: str | os.PathLike) -> Iterator[Path]:
    """An empty temporary folder beside `target`, renamed to `target` on success; on an exception removed."""
    target = Path(target)
    with _output_temp(target, folder=True) as tmp:
        yield tmp
    old = target.with_name(f".{target.name}.old")
    if target.exists():
        shutil.rmtree(old, ignore_errors=True)
        target.rename(old)
    tmp.rename(target)
    shutil.rmtree(old, ignore_errors=True)


@contextmanager
def scratch_dir(target: str | os.PathLike) -> Iterator[Path]:
    """An empty folder beside `target` for the work of writing it, removed on leaving, swept as its temporaries are."""
    tmp = _temp_beside(Path(target), folder=True)
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def atomic_file(target: str | os.PathLike, mode: str = "w", **open_kwargs: Any) -> Iterator[Any]:
    """A temporary file beside `target` open for writing, renamed over `target` on success."""
    with _output_temp(Path(target), folder=False) as tmp:
        with open(tmp, mode, **open_kwargs) as handle:
            yield handle
        os.replace(tmp, target)


def _name_the_output(exc: BaseException, tmp: Path, target: Path) -> None:
    """A write error names the output, not its temporary; a full disk (write() names no file) names it too."""
    if not isinstance(exc, OSError):
        return
    if exc.filename is None:
        if exc.errno in NO_ROOM:
            exc.filename = str(target)
        return
    name = os.fsdecode(exc.filename)
    if name == str(tmp) or name.startswith(f"{tmp}{os.sep}"):
        exc.filename = f"{target}{name[len(str(tmp)):]}"


def write_json(path: str | os.PathLike, obj: Any) -> None:
    with atomic_file(path, "w", encoding="utf-8") as handle:
        json.dump(obj, handle, indent=2, sort_keys=True)
        handle.write("\n")


def mark_empty(folder: str | os.PathLike) -> None:
    """Leave EMPTY_MARK in `folder` where nothing else is (DVC warns of an empty output folder, ignores the mark)."""
    mark = Path(folder) / EMPTY_MARK
    if any(path != mark for path in Path(folder).iterdir()):
        mark.unlink(missing_ok=True)
    else:
        mark.write_text(EMPTY_TEXT, encoding="utf-8")
