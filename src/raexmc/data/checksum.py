"""File checksums, computed in chunks so large archives never sit in memory."""

from __future__ import annotations

import hashlib
import os

from ..errors import ChecksumError


def file_digest(path: str | os.PathLike, algorithm: str = "sha256") -> str:
    digest = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify(path: str | os.PathLike, expected: str | None, algorithm: str, origin: str | None = None) -> str:
    """The file's digest, or ChecksumError when a pinned `expected` differs (`origin` names the download)."""
    actual = file_digest(path, algorithm)
    if expected and actual.lower() != expected.lower():
        raise ChecksumError(f"{algorithm} {actual} does not match the pinned {expected}", origin or path)
    return actual
