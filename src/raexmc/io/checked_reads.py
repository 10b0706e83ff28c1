"""Stage files read back so that a missing, truncated or foreign file is one DataError naming it, not a
traceback."""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..errors import DataError


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
