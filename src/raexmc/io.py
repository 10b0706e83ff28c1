"""Stage files: outputs written atomically (a stage's results appear whole or not at all), memory-mapped
outputs reserved on disk before they are written (a full disk is an error, not a SIGBUS), files written by
libraries that do not check their writes checked for their size before they are renamed into place, and
files read back so that a missing, truncated or foreign file is one DataError naming it, not a traceback."""

from __future__ import annotations

import errno
import json
import math
import os
import re
import resource
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import scipy.sparse as sp
from numpy.typing import DTypeLike

from .errors import DataError

NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
"""A write the storage has no room for: a full disk or quota, or a file larger than the filesystem or the
process's file-size limit (`ulimit -f`) allows."""


def _umask() -> int:
    """The process umask (temp files are created private; outputs should not be)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _temp_prefix(target: Path) -> str:
    """Temporaries are named `.<name>.<pid>-<random>.tmp`: the writer's process id tells a
    leftover of a killed writer from the temporary of one still running."""
    return f".{target.name}.{os.getpid()}-"


def _stale_temp(name: str, prefix: str) -> bool:
    """Whether `name` is a temporary of the target whose names start with `prefix` (`.<name>.`)
    left by a writer no longer running. Its tag (between `prefix` and `.tmp`) never holds a dot,
    so a temporary of `<name>.json` is not taken for one of `<name>`."""
    if not (name.startswith(prefix) and name.endswith(".tmp")):
        return False
    tag = name[len(prefix):-len(".tmp")]
    if not tag or "." in tag:
        return False
    pid = tag.partition("-")[0]
    # a tag without a process id was named before temporaries carried one: its writer is long gone
    return not pid.isdigit() or _writer_gone(int(pid))


def _writer_gone(pid: int) -> bool:
    """Whether no process `pid` runs (a running process of another user counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass
    return False


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def remove_leftovers(target: Path) -> None:
    """Remove what a killed earlier writer of `target` left beside it: its temporary file or folder
    (gigabytes for a dataset or token cache) and the output it had set aside while swapping in the
    new one (`.<name>.old`). A temporary whose writer still runs is kept."""
    if not target.parent.is_dir():
        return
    prefix = f".{target.name}."
    for sibling in target.parent.iterdir():
        if sibling.name == f"{prefix}old" or _stale_temp(sibling.name, prefix):
            _remove(sibling)


# `.<target>.<pid>-<random>.tmp`: what _temp_prefix and tempfile's random names (a-z, 0-9, _) make.
_TEMP_NAME = re.compile(r"\..+\.(?P<pid>\d+)-[a-z0-9_]+\.tmp")


def remove_dead_temps(folder: str | os.PathLike) -> None:
    """Remove every temporary under `folder`, at any depth, whose writer no longer runs.

    remove_leftovers cleans up only when the same output is written again. A killed stage whose
    output DVC later restores from its run cache never runs again, so its temporary would stay;
    sweeping the whole output tree at every stage start removes it. A temporary whose writer
    runs (a concurrent run's) is kept; a temporary's own content goes with it unread.
    """
    for parent, folders, files in os.walk(folder):
        for name in (*folders, *files):
            temp = _TEMP_NAME.fullmatch(name)
            if temp and _writer_gone(int(temp["pid"])):
                _remove(Path(parent, name))
        folders[:] = [name for name in folders if not _TEMP_NAME.fullmatch(name)]


@contextmanager
def atomic_dir(target: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temporary folder beside `target`; rename it to `target` on success.

    On an exception the temporary folder is removed and `target` is left as it was, so a later
    stage never reads a half-written output; what a killed earlier run left is removed first.
    """
    target = Path(target)
    remove_leftovers(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=_temp_prefix(target), suffix=".tmp", dir=target.parent))
    os.chmod(tmp, 0o777 & ~_umask())
    try:
        yield tmp
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        _name_the_output(exc, tmp, target)
        raise
    if target.exists():
        old = target.with_name(f".{target.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        target.rename(old)
        tmp.rename(target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(target)


@contextmanager
def atomic_file(target: str | os.PathLike, mode: str = "w", **open_kwargs: Any) -> Iterator[Any]:
    """Open a temporary file beside `target` for writing; rename it over `target` on success.
    What a killed earlier run left beside `target` is removed first."""
    target = Path(target)
    remove_leftovers(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=_temp_prefix(target), suffix=".tmp", dir=target.parent)
    os.close(fd)
    os.chmod(tmp_name, 0o666 & ~_umask())
    try:
        with open(tmp_name, mode, **open_kwargs) as handle:
            yield handle
        os.replace(tmp_name, target)
    except BaseException as exc:
        Path(tmp_name).unlink(missing_ok=True)
        _name_the_output(exc, Path(tmp_name), target)
        raise


def _name_the_output(exc: BaseException, tmp: Path, target: Path) -> None:
    """A write error names the output, not the temporary name it was written under; a full disk,
    which write() reports with no file name, names the output too."""
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
    """Write `obj` as indented JSON, atomically."""
    with atomic_file(path, "w", encoding="utf-8") as handle:
        json.dump(obj, handle, indent=2, sort_keys=True)
        handle.write("\n")


def require_size(path: str | os.PathLike, expected: int) -> None:
    """Check that `path` holds the `expected` bytes its writer wrote, or raise the OSError its writer swallowed.

    hnswlib writes through a C++ stream it never checks, faiss only prints a failed fclose, so under a full disk
    or a file-size limit they leave a short file and return. A short file is EFBIG when it reached this process's
    file-size limit (`ulimit -f`), else ENOSPC (a full disk or quota), named and with the bytes written, so the
    stage ends in one line and its temporary output is removed instead of renamed into place.
    """
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
    """`handle`, a new binary file, for a library that writes to a file object (numpy, torch.save, faiss through
    PyCallbackIOWriter), so that every write goes through Python, which checks it: a write error is raised as
    the OSError it is, naming the file, whatever the library made of it; and once flushed the file must hold
    every byte that was written (require_size)."""
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
    """A new .npy file of `dtype` and `shape`, memory-mapped for writing, every byte of it reserved on disk first.

    A store through a memory map into space the disk does not have is not an exception but SIGBUS: the
    process dies with no message, its temporary output stays and its MLflow run is never closed. With
    the whole file reserved first, a disk that cannot hold it is an OSError naming the file and the
    bytes it needs, raised before any work is done.
    """
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


def read_json(path: str | os.PathLike) -> Any:
    """A JSON file's value, or DataError naming the file (and the line) when it is missing or not JSON."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        raise DataError("file not found: rerun the stage that writes it", path) from None
    except json.JSONDecodeError as exc:
        raise DataError(f"not valid JSON ({exc.msg}): rerun the stage that writes it", path, exc.lineno) from None
    except UnicodeDecodeError:
        raise DataError("not UTF-8 text: rerun the stage that writes it", path) from None


# What numpy and scipy raise on a truncated or foreign .npy/.npz file (a zip that is not one: BadZipFile).
_UNREADABLE = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile)


@contextmanager
def _reading(path: Path, what: str) -> Iterator[None]:
    """Reading `path` as `what`: a missing file, or one numpy or scipy cannot read, is one DataError naming it."""
    if not path.is_file():
        raise DataError("file not found: rerun the stage that writes it", path)
    try:
        yield
    except _UNREADABLE as exc:
        raise DataError(f"unreadable {what} ({exc}): rerun the stage that writes it", path) from None


def load_array(path: str | os.PathLike, mmap_mode: str | None = None) -> np.ndarray:
    """A .npy array (memory-mapped with `mmap_mode`); pickled objects are refused."""
    with _reading(Path(path), "array"):
        return np.load(path, mmap_mode=mmap_mode, allow_pickle=False)


def load_sparse(path: str | os.PathLike) -> sp.csr_matrix:
    """A scipy .npz sparse matrix, as CSR."""
    with _reading(Path(path), "sparse matrix"):
        return sp.load_npz(path).tocsr()


def load_arrays(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Every array of a .npz archive, read into memory."""
    with _reading(Path(path), "archive"), np.load(path, allow_pickle=False) as archive:
        return {key: archive[key] for key in archive.files}
