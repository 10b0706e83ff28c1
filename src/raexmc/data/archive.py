"""Safe extraction of tar, zip and .deb archives: an absolute path, a `..` or link out of the target, or a device
file rejects the whole archive before anything is written."""

from __future__ import annotations

import io
import os
import posixpath
import tarfile
import zipfile
from pathlib import Path

from ..errors import DataError, UnsafeArchiveError
from ..io import atomic_dir
from .layouts import require_file


def _inside(name: str) -> bool:  # whether a relative POSIX path stays inside its folder
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        return False
    normal = posixpath.normpath(name.replace("\\", "/"))
    return normal != ".." and not normal.startswith("../")


def _check_tar(archive: tarfile.TarFile, origin: str) -> None:
    for member in archive.getmembers():
        if not _inside(member.name):
            raise UnsafeArchiveError("member path escapes the extraction folder", origin, member.name)
        if member.issym() or member.islnk():
            base = posixpath.dirname(member.name) if member.issym() else ""
            if member.linkname.startswith("/") or not _inside(posixpath.join(base, member.linkname)):
                raise UnsafeArchiveError(f"link to '{member.linkname}' points outside the extraction folder",
                                         origin, member.name)
        elif not (member.isfile() or member.isdir()):
            raise UnsafeArchiveError("device or special file", origin, member.name)


def _check_zip(archive: zipfile.ZipFile, origin: str) -> None:
    for info in archive.infolist():
        if not _inside(info.filename):
            raise UnsafeArchiveError("member path escapes the extraction folder", origin, info.filename)
        if (info.external_attr >> 16) & 0o170000 == 0o120000:
            raise UnsafeArchiveError("symbolic link in a zip archive", origin, info.filename)


def _extract_tar_bytes(fileobj: io.BufferedIOBase, origin: str, folder: Path) -> None:
    try:
        with tarfile.open(fileobj=fileobj, mode="r:*") as archive:
            _check_tar(archive, origin)
            archive.extractall(folder, filter="data")
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise DataError(f"corrupt tar archive ({exc})", origin) from None


def ar_members(path: str | os.PathLike) -> dict[str, bytes]:
    """Members of a Unix `ar` archive (the container of a .deb)."""
    path, data = Path(path), Path(path).read_bytes()
    if not data.startswith(b"!<arch>\n"):
        raise DataError("not an ar archive (bad magic)", path)
    members, pos = {}, 8
    while pos + 60 <= len(data):
        header = data[pos:pos + 60]
        name = header[:16].decode("ascii", "replace").strip().rstrip("/")
        try:
            size = int(header[48:58].decode("ascii").strip())
        except ValueError:
            raise DataError("corrupt ar member header", path, name) from None
        body = data[pos + 60: pos + 60 + size]
        if len(body) != size:
            raise DataError("truncated ar member", path, name)
        members[name] = body
        pos += 60 + size + (size % 2)
    return members


def extract(path: str | os.PathLike, target: str | os.PathLike) -> Path:
    """Extract a .tar(.gz/.xz/.bz2), .zip or .deb (its data part) into `target`, atomically."""
    path = require_file(path)
    with atomic_dir(target) as folder:
        if path.suffix == ".deb":
            members = ar_members(path)
            data_name = next((n for n in members if n.startswith("data.tar")), None)
            if data_name is None:
                raise DataError("no data.tar member in Debian package", path)
            _extract_tar_bytes(io.BytesIO(members[data_name]), f"{path}:{data_name}", folder)
        elif zipfile.is_zipfile(path):
            try:
                with zipfile.ZipFile(path) as archive:
                    _check_zip(archive, str(path))
                    archive.extractall(folder)
            except zipfile.BadZipFile as exc:
                raise DataError(f"corrupt zip archive ({exc})", path) from None
        else:
            with open(path, "rb") as handle:
                _extract_tar_bytes(handle, str(path), folder)
    return Path(target)
