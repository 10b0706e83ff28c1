"""Fetch a pinned Debian package, checked: with apt-get where it offers the version, else from a Debian mirror's pool
over HTTP(S), so the Debian-built datasets need no Debian."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import urllib.parse
import urllib.request
from dataclasses import dataclass, fields
from pathlib import Path

from ..errors import ConfigError, SourceError
from ..io import file_digest, verify

DISTRIBUTION = "distribution"
DEBIAN_MIRROR = "https://deb.debian.org/debian"


@dataclass(frozen=True)
class DebPin:
    """A package as a dataset entry's `package` names it, with its checksums. `source`: the source package where
    it differs (the pool's folder: wordnet-base lies under wordnet/); `version: distribution` takes what apt offers."""

    name: str
    version: str
    md5: str | None = None
    sha256: str | None = None
    source: str | None = None
    arch: str = "all"

    @property
    def spec(self) -> str:  # as apt-get names it
        return self.name if self.version == DISTRIBUTION else f"{self.name}={self.version}"

    def pool_path(self) -> str:
        """pool/main/<prefix>/<source>/<name>_<version without its epoch>_<arch>.deb, the prefix being the
        source's first letter, or its first four for a lib* source."""
        source = self.source or self.name
        prefix = source[:4] if source.startswith("lib") else source[0]
        version = self.version.split(":", 1)[-1]
        return f"pool/main/{prefix}/{source}/{self.name}_{version}_{self.arch}.deb"


def deb_pin(entry: object, path: str, key: str) -> DebPin:
    known = [field.name for field in fields(DebPin)]
    if not isinstance(entry, dict) or not entry.get("name") or not entry.get("version"):
        raise ConfigError("needs a mapping with a package name and version", path, key)
    unknown = sorted(set(entry) - set(known))
    if unknown:
        raise ConfigError(f"unknown key '{unknown[0]}' (known: {', '.join(known)})", path, key)
    return DebPin(**{name: str(value) for name, value in entry.items() if value is not None})


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
    proc = subprocess.run(["apt-get", "download", spec], cwd=folder, capture_output=True, text=True)
    debs = list(folder.glob("*.deb"))
    if proc.returncode != 0 or len(debs) != 1:
        lines = ([ln for ln in proc.stderr.splitlines() if ln.startswith("E:")] or proc.stderr.splitlines()
                 or ["no .deb"])
        raise SourceError(f"apt-get download failed: {lines[-1]} (run 'apt-get update' as root first?)", spec)
    return debs[0]


def _mirror_download(url: str, folder: Path) -> Path:
    target = folder / url.rsplit("/", 1)[-1]
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(target, "wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)
    except (OSError, ValueError) as exc:  # URLError and HTTPError are OSErrors; ValueError: not a URL
        raise SourceError(f"download failed ({exc})", url) from None
    return target


def _download(pin: DebPin, folder: Path, mirror: str) -> tuple[str, Path]:
    """(origin, file) of the package: apt-get where it offers the version, else (pinned) `mirror`'s pool."""
    apt_failed = None
    if shutil.which("apt-get") is not None:
        try:
            return pin.spec, _apt_download(pin.spec, folder)
        except SourceError as failed:
            apt_failed = failed
    if pin.version == DISTRIBUTION:
        raise apt_failed or SourceError("version 'distribution' needs apt-get: pin a version to fetch it from a "
                                        "mirror", pin.spec)
    origin = f"{mirror.rstrip('/')}/{pin.pool_path()}"
    try:
        return origin, _mirror_download(origin, folder)
    except SourceError as failed:
        if apt_failed is None:
            raise
        raise SourceError(f"{apt_failed.message}; not on the mirror either ({origin}: {failed.message})",
                          pin.spec) from None


def fetch_deb(pin: DebPin, cache: Path, mirror: str = DEBIAN_MIRROR) -> DebPackage:
    """The package downloaded into `cache`: a pinned version verified (a mismatch leaves nothing) and reused while
    it matches; `version: distribution` records what apt gave."""
    cache.mkdir(parents=True, exist_ok=True)
    pinned = pin.version != DISTRIBUTION
    if pinned:
        cached = cache / f"{pin.name}_{urllib.parse.quote(pin.version, safe='')}.deb"
        if cached.is_file() and all(not expected or file_digest(cached, algorithm) == expected.lower()
                                    for algorithm, expected in (("sha256", pin.sha256), ("md5", pin.md5))):
            return DebPackage(cached, pin.name, pin.version, file_digest(cached, "md5"), file_digest(cached, "sha256"))
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        origin, downloaded = _download(pin, Path(tmp), mirror)
        sha256 = verify(downloaded, pin.sha256 if pinned else None, "sha256", origin=origin)
        md5 = verify(downloaded, pin.md5 if pinned else None, "md5", origin=origin)
        version = pin.version if pinned else urllib.parse.unquote(downloaded.name.split("_")[1])
        target = cache / f"{pin.name}_{urllib.parse.quote(version, safe='')}.deb"
        downloaded.replace(target)
    return DebPackage(target, pin.name, version, md5, sha256)
