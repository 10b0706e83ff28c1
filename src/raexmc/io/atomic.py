"""Outputs written atomically: a stage's results appear whole or not at all, what a killed writer left beside an
output is removed, and a write error names the output, not its temporary."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .checked_writes import NO_ROOM


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
    """Whether `name` is a temporary of the target (`prefix` `.<name>.`) whose writer no longer runs; its tag
    holds no dot, so `<name>.json`'s is not `<name>`'s."""
    if not (name.startswith(prefix) and name.endswith(".tmp")):
        return False
    tag = name[len(prefix):-len(".tmp")]
    if not tag or "." in tag:
        return False
    pid = tag.partition("-")[0]
    # a tag without a process id was named before temporaries carried one: its writer is long gone
    return not pid.isdigit() or writer_gone(int(pid))


def writer_gone(pid: int) -> bool:
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
    """Remove what a killed writer of `target` left: its temporary and the `.<name>.old` it set aside;
    a temporary whose writer still runs is kept."""
    if not target.parent.is_dir():
        return
    prefix = f".{target.name}."
    for sibling in target.parent.iterdir():
        if sibling.name == f"{prefix}old" or _stale_temp(sibling.name, prefix):
            _remove(sibling)


# `.<target>.<pid>-<random>.tmp`: what _temp_prefix and tempfile's random names (a-z, 0-9, _) make.
_TEMP_NAME = re.compile(r"\..+\.(?P<pid>\d+)-[a-z0-9_]+\.tmp")


def remove_dead_temps(folder: str | os.PathLike) -> None:
    """Remove every temporary under `folder` whose writer no longer runs: a killed stage whose output DVC
    restores from its run cache never writes it again, so its temporary would stay."""
    for parent, folders, files in os.walk(folder):
        for name in (*folders, *files):
            temp = _TEMP_NAME.fullmatch(name)
            if temp and writer_gone(int(temp["pid"])):
                _remove(Path(parent, name))
        folders[:] = [name for name in folders if not _TEMP_NAME.fullmatch(name)]


@contextmanager
def atomic_dir(target: str | os.PathLike) -> Iterator[Path]:
    """An empty temporary folder beside `target`, renamed to `target` on success; on an exception removed,
    `target` left as it was."""
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
def scratch_dir(target: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty folder beside `target` for the work of writing it, named as its temporaries are, and remove
    it on leaving: what a killed writer leaves there is swept with them (remove_leftovers, remove_dead_temps)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=_temp_prefix(target), suffix=".tmp", dir=target.parent))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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


EMPTY_MARK = ".empty"  # .dvcignore names it
EMPTY_TEXT = "This run left this DVC output empty; DVC ignores this file (.dvcignore).\n"


def mark_empty(folder: str | os.PathLike) -> None:
    """Leave EMPTY_MARK in `folder` where nothing else is (DVC warns of an empty output folder; it ignores the
    mark, so the lock records the empty folder as before)."""
    mark = Path(folder) / EMPTY_MARK
    if any(path != mark for path in Path(folder).iterdir()):
        mark.unlink(missing_ok=True)
    else:
        mark.write_text(EMPTY_TEXT, encoding="utf-8")
