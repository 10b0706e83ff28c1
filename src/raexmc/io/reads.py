"""Stage files read back checked: a missing, cut or foreign file is one DataError naming it; a download is checked
against its pinned digest; a folder's manifest.json (each file's size and sha256, the writer's header, and the sha256
of all that) refuses a folder changed, cut or added to before it is read (docs/reliability.md: the cost)."""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..errors import ChecksumError, DataError
from .atomic import write_json

__all__ = ["MANIFEST_FILE", "checked_manifest", "file_digest", "load_array", "load_arrays", "load_sparse", "read_json",
           "verify", "write_manifest"]

MANIFEST_FILE = "manifest.json"
# What numpy and scipy raise on a truncated or foreign .npy/.npz file (a zip that is not one: BadZipFile).
_UNREADABLE = (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile)


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


@contextmanager
def _reading(path: Path, what: str) -> Iterator[None]:
    if not path.is_file():
        raise DataError("file not found: rerun the stage that writes it", path)
    try:
        yield
    except _UNREADABLE as exc:
        raise DataError(f"unreadable {what} ({exc}): rerun the stage that writes it", path) from None


def load_array(path: str | os.PathLike, mmap_mode: str | None = None) -> np.ndarray:
    with _reading(Path(path), "array"):
        return np.load(path, mmap_mode=mmap_mode, allow_pickle=False)


def load_sparse(path: str | os.PathLike) -> sp.csr_matrix:
    with _reading(Path(path), "sparse matrix"):
        return sp.load_npz(path).tocsr()


def load_arrays(path: str | os.PathLike) -> dict[str, np.ndarray]:
    with _reading(Path(path), "archive"), np.load(path, allow_pickle=False) as archive:
        return {key: archive[key] for key in archive.files}


def file_digest(path: str | os.PathLike, algorithm: str = "sha256") -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, algorithm).hexdigest()


def verify(path: str | os.PathLike, expected: str | None, algorithm: str, origin: str | None = None) -> str:
    """The file's digest, or ChecksumError when a pinned `expected` differs (`origin` names the download)."""
    actual = file_digest(path, algorithm)
    if expected and actual.lower() != expected.lower():
        raise ChecksumError(f"{algorithm} {actual} does not match the pinned {expected}", origin or path)
    return actual


def _files(folder: Path) -> list[str]:
    found = [path.relative_to(folder).as_posix() for path in folder.rglob("*") if not path.is_dir()]
    return sorted(name for name in found if name != MANIFEST_FILE)


def write_manifest(folder: str | os.PathLike, header: dict[str, Any]) -> None:
    """Write `folder`'s manifest (last): `header` and the size and sha256 of every file it holds."""
    folder = Path(folder)
    files = {name: {"size": (folder / name).stat().st_size, "sha256": file_digest(folder / name)}
             for name in _files(folder)}
    body = {**header, "files": files}
    write_json(folder / MANIFEST_FILE, {**body, "sha256": _seal(body)})


def _seal(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def checked_manifest(folder: str | os.PathLike, rerun: str) -> dict[str, Any]:
    """`folder`'s manifest once every file it lists is there as written and the folder holds no other; else a
    DataError naming the first file (a whole subfolder missing: that folder) that is not, and `rerun`."""
    folder = Path(folder)
    path = folder / MANIFEST_FILE
    if not path.is_file():
        raise DataError(f"not found: not a folder this code wrote, or one written before folders had one: {rerun}",
                        path)
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise DataError(f"not JSON: changed since the folder was written: {rerun}", path) from None
    body = {key: value for key, value in manifest.items() if key != "sha256"} if isinstance(manifest, dict) else None
    if body is None or _seal(body) != manifest.get("sha256"):
        raise DataError(f"its contents are not those it was written with (its sha256): {rerun}", path)
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(isinstance(entry, dict) and isinstance(entry.get("size"), int)
                                              and isinstance(entry.get("sha256"), str) for entry in files.values()):
        raise DataError(f"not a manifest (a \"files\" object of size and sha256 per file): {rerun}", path)
    for name, entry in files.items():
        _check_file(folder, name, entry, files, rerun)
    for name in _files(folder):
        if name not in files:
            raise DataError(f"not in {MANIFEST_FILE}: added since the folder was written: {rerun}", folder / name)
    return manifest


def _check_file(folder: Path, name: str, entry: dict[str, Any], files: dict[str, Any], rerun: str) -> None:
    path = folder / name
    if not path.is_file():
        top = name.split("/")[0]
        if top != name and not (folder / top).exists():
            listed = sum(other.startswith(f"{top}/") for other in files)
            raise DataError(f"missing ({MANIFEST_FILE} lists {listed} files in it): {rerun}", folder / top)
        raise DataError(f"missing ({MANIFEST_FILE} lists it): {rerun}", path)
    size = path.stat().st_size
    if size != entry["size"]:
        raise DataError(f"{size:,} bytes, {MANIFEST_FILE} says {entry['size']:,}: changed since the folder was "
                        f"written: {rerun}", path)
    if file_digest(path) != entry["sha256"]:
        raise DataError(f"its sha256 is not {MANIFEST_FILE}'s: changed since the folder was written: {rerun}", path)
