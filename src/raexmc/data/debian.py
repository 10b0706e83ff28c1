"""Fetch a Debian package with `apt-get download` and check it against a pinned checksum."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from ..errors import SourceError
from .checksum import file_digest, verify

DISTRIBUTION = "distribution"


@dataclass
class DebPackage:
    path: Path
    name: str
    version: str
    md5: str
    sha256: str

    def provenance(self) -> dict[str, str]:
        return {"package": self.name, "version": self.version, "md5": self.md5, "sha256": self.sha256}


def _apt_download(spec: str, folder: Path) -> Path:
    if shutil.which("apt-get") is None:
        raise SourceError("apt-get is not available on this machine", spec)
    proc = subprocess.run(["apt-get", "download", spec], cwd=folder, capture_output=True, text=True)
    debs = list(folder.glob("*.deb"))
    if proc.returncode != 0 or len(debs) != 1:
        lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("E:")] or proc.stderr.splitlines() or ["no .deb"]
        raise SourceError(f"apt-get download failed: {lines[-1]} (run 'apt-get update' as root first?)", spec)
    return debs[0]


def fetch_deb(name: str, version: str, md5: str | None, cache: Path) -> DebPackage:
    """Download `name=version` (or the distribution's current version) into `cache`.

    A pinned version is verified against `md5` and reused from the cache when it still matches;
    `version: distribution` takes whatever apt offers and records its version and checksums.
    """
    cache.mkdir(parents=True, exist_ok=True)
    if version != DISTRIBUTION:
        cached = cache / f"{name}_{urllib.parse.quote(version, safe='')}.deb"
        if cached.is_file() and (not md5 or file_digest(cached, "md5") == md5.lower()):
            return DebPackage(cached, name, version, file_digest(cached, "md5"), file_digest(cached, "sha256"))
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        spec = name if version == DISTRIBUTION else f"{name}={version}"
        downloaded = _apt_download(spec, Path(tmp))
        actual_version = urllib.parse.unquote(downloaded.name.split("_")[1])
        digest = verify(downloaded, md5 if version != DISTRIBUTION else None, "md5", origin=spec)
        target = cache / f"{name}_{urllib.parse.quote(actual_version, safe='')}.deb"
        downloaded.replace(target)
    return DebPackage(target, name, actual_version, digest, file_digest(target, "sha256"))
