"""Download the Extreme Classification Repository's archives from Google Drive with gdown (which passes
the confirmation page and resumes a partial file), checked against a pinned sha256.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gdown

from ..errors import SourceError
from .checksum import verify


@dataclass
class Archive:
    path: Path
    url: str
    sha256: str


def fetch_archive(url: str, target: Path, sha256: str | None) -> Archive:
    """Download `url` to `target` (resuming) and verify its sha256: a match is reused, a mismatch removed."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.is_file():
        try:
            result = gdown.download(url, str(target), quiet=False, resume=True, retries=2)
        except Exception as exc:  # gdown raises several unrelated types for network failures
            raise SourceError(f"download failed ({type(exc).__name__}: {exc})", url) from None
        if result is None or not target.is_file():
            raise SourceError("download failed (no file received)", url)
    try:
        digest = verify(target, sha256, "sha256")
    except Exception:
        target.unlink(missing_ok=True)
        raise
    return Archive(target, url, digest)
