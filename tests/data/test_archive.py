"""Safe archive extraction: real tar, zip and .deb files built here, safe and hostile.

Every hostile archive holds a harmless member *before* the bad one, so an extractor that wrote
members as it went would leave that file behind; the tests check that nothing at all was written.
"""

from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path

import pytest

from raexmc.data.archive import ar_members, extract
from raexmc.errors import DataError, UnsafeArchiveError

SAFE = b"harmless content\n"
TAR_TYPES = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE, "hard": tarfile.LNKTYPE,
             "fifo": tarfile.FIFOTYPE}


def tar_bytes(members: list[tuple], mode: str = "w:gz") -> bytes:
    """members: ("file", name, data) | ("dir", name) | ("sym"/"hard", name, target) | ("fifo", name)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode, format=tarfile.GNU_FORMAT) as archive:
        for kind, name, *rest in members:
            info = tarfile.TarInfo(name)
            info.type, info.mode = TAR_TYPES[kind], {"dir": 0o755, "sym": 0o777}.get(kind, 0o644)
            data = rest[0] if kind == "file" else b""
            info.size, info.linkname = len(data), rest[0] if kind in ("sym", "hard") else ""
            archive.addfile(info, io.BytesIO(data) if kind == "file" else None)
    return buffer.getvalue()


def zip_bytes(members: list[tuple]) -> bytes:
    """members: ("file", name, data) | ("sym", name, target)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for kind, name, payload in members:
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o120777 if kind == "sym" else 0o100644) << 16
            archive.writestr(info, payload)
    return buffer.getvalue()


def ar_bytes(members: list[tuple[str, bytes]]) -> bytes:
    """A Unix `ar` archive, written by hand: magic, then a 60-byte header and a body (padded to even) per member."""
    out = bytearray(b"!<arch>\n")
    for name, body in members:
        out += f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(body):<10}`\n".encode("ascii") + body
        out += b"\n" * (len(body) % 2)
    return bytes(out)


def deb_bytes(data_members: list[tuple]) -> bytes:
    control = tar_bytes([("file", "./control", b"Package: tiny\nVersion: 1.0\n")], mode="w:xz")
    return ar_bytes([("debian-binary", b"2.0\n"), ("control.tar.xz", control),
                     ("data.tar.xz", tar_bytes(data_members, mode="w:xz"))])


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    (tmp_path / "src").mkdir(exist_ok=True)
    (tmp_path / "src" / name).write_bytes(data)
    return tmp_path / "src" / name


def assert_nothing_written(tmp_path: Path, archive: Path, target: Path) -> None:
    """Only the archive (and the empty parent atomic_dir made) may exist under tmp_path, hidden files included."""
    assert not target.exists()
    assert list(target.parent.iterdir()) == [], "temporary folders left beside the target"
    expected = {"src", str(archive.relative_to(tmp_path)), str(target.parent.relative_to(tmp_path))}
    assert {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")} == expected


# --- valid archives ------------------------------------------------------------------------------

@pytest.mark.parametrize("name, mode", [("data.tar.gz", "w:gz"), ("plain.tar", "w"), ("packed.tar.xz", "w:xz"),
                                        ("packed.tar.bz2", "w:bz2")])
def test_tar_extracts_files_dirs_and_inner_links(tmp_path, name, mode):
    members = [("dir", "pkg"), ("file", "pkg/a.txt", b"alpha\n"), ("file", "pkg/sub/b.txt", b"beta\n"),
               ("sym", "pkg/sub/link", "../a.txt"), ("hard", "pkg/hard", "pkg/a.txt")]
    archive = write(tmp_path, name, tar_bytes(members, mode=mode))
    target = tmp_path / "dest" / "out"
    assert extract(archive, target) == target
    assert (target / "pkg/a.txt").read_bytes() == b"alpha\n" and (target / "pkg/sub/b.txt").read_bytes() == b"beta\n"
    assert (target / "pkg/sub/link").is_symlink() and (target / "pkg/sub/link").read_bytes() == b"alpha\n"
    assert (target / "pkg/hard").read_bytes() == b"alpha\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out"]  # no temp folder left


def test_a_missing_or_failed_extraction_leaves_the_target_as_it_was_and_a_zip_replaces_it_whole(tmp_path):
    target = tmp_path / "dest" / "out"
    with pytest.raises(DataError, match=f"{tmp_path / 'nowhere.tar.gz'}: file not found"):
        extract(tmp_path / "nowhere.tar.gz", target)
    assert not target.exists()
    target.mkdir(parents=True)
    (target / "stale.txt").write_text("old")
    with pytest.raises(UnsafeArchiveError):
        extract(write(tmp_path, "evil.tar.gz", tar_bytes([("file", "ok.txt", SAFE), ("file", "../x", SAFE)])), target)
    assert sorted(p.name for p in target.parent.iterdir()) == ["out"]
    assert sorted(p.name for p in target.iterdir()) == ["stale.txt"]
    extract(write(tmp_path, "data.zip", zip_bytes([("file", "LF-Tiny/trn.txt", b"train\n"),
                                                   ("file", "LF-Tiny/deep/tst.txt", b"test\n")])), target)
    assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()) == [
        "LF-Tiny/deep/tst.txt", "LF-Tiny/trn.txt"]
    assert (target / "LF-Tiny/deep/tst.txt").read_bytes() == b"test\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out"]


def test_deb_extracts_its_data_part_only(tmp_path):
    deb = write(tmp_path, "tiny_1.0_all.deb", deb_bytes([("dir", "./usr"), ("file", "./usr/share/tiny/words.txt",
                                                                             b"one\ntwo\n"),
                                                         ("sym", "./usr/share/tiny/alias.txt", "words.txt")]))
    members = ar_members(deb)
    assert list(members) == ["debian-binary", "control.tar.xz", "data.tar.xz"] and members["debian-binary"] == b"2.0\n"
    target = tmp_path / "dest" / "out"
    extract(deb, target)
    assert (target / "usr/share/tiny/words.txt").read_bytes() == b"one\ntwo\n"
    assert (target / "usr/share/tiny/alias.txt").read_bytes() == b"one\ntwo\n"
    assert not (target / "control").exists()  # the control part is not unpacked


# --- unsafe archives -----------------------------------------------------------------------------

OUTSIDE = "/nonexistent-raexmc/escaped-abs.txt"
UNSAFE_TAR = {
    "absolute-path": ([("file", OUTSIDE, b"pwned\n")], OUTSIDE),
    "dotdot": ([("file", "../escaped.txt", b"pwned\n")], "../escaped.txt"),
    "dotdot-deep": ([("file", "a/b/../../../escaped.txt", b"pwned\n")], "a/b/../../../escaped.txt"),
    "symlink-absolute": ([("sym", "link", OUTSIDE)], "link"),
    "symlink-relative": ([("sym", "link", "../..")], "link"),
    "symlink-nested-relative": ([("dir", "sub"), ("sym", "sub/link", "../../escaped.txt")], "sub/link"),
    "hardlink-dotdot": ([("hard", "hard", "../escaped.txt")], "hard"),
    "hardlink-absolute": ([("hard", "hard", OUTSIDE)], "hard"),
    "fifo": ([("fifo", "pipe")], "pipe"),
}
UNSAFE_ZIP = {"dotdot": ("file", "../escaped.txt", b"pwned\n"), "dotdot-deep": ("file", "dir/../../escaped.txt", b""),
              "absolute-path": ("file", "/abs-escaped.txt", b""), "symlink-absolute": ("sym", "link", "/etc/passwd"),
              "symlink-inside": ("sym", "innocent-link", "ok.txt")}  # any zip symlink is refused


def unsafe(container: str, case: str) -> tuple[str, bytes, str]:
    """(file name, bytes, bad member) of a hostile archive: a harmless member, then the bad one."""
    if container == "zip":
        bad = UNSAFE_ZIP[case]
        return "evil.zip", zip_bytes([("file", "ok.txt", SAFE), bad]), bad[1]
    members, member = UNSAFE_TAR[case]
    if container == "deb":
        return "evil_1.0_all.deb", deb_bytes([("file", "./usr/ok.txt", SAFE), *members]), member
    return "evil.tar.gz", tar_bytes([("file", "ok.txt", SAFE), *members]), member


@pytest.mark.parametrize("container, case", [*(("tar", case) for case in UNSAFE_TAR), *(("zip", case) for case in
                                             UNSAFE_ZIP), ("deb", "dotdot"), ("deb", "symlink-relative"),
                                             ("deb", "hardlink-absolute")])
def test_an_unsafe_member_rejects_the_whole_archive(tmp_path, container, case):
    name, data, member = unsafe(container, case)
    archive, target = write(tmp_path, name, data), tmp_path / "dest" / "out"
    with pytest.raises(UnsafeArchiveError) as info:
        extract(archive, target)
    assert str(archive) in str(info.value) and info.value.record == member
    assert container != "deb" or f"{archive}:data.tar.xz" in str(info.value)
    assert_nothing_written(tmp_path, archive, target)


# --- corrupt and missing -------------------------------------------------------------------------

def truncated_tar_gz() -> bytes:
    """Incompressible content, so the gzip stream is long and cutting it in half breaks a member."""
    payload = bytes((i * 7919 + (i >> 3) * 104729) % 251 for i in range(200_000))
    whole = tar_bytes([("file", "first.bin", payload), ("file", "second.bin", payload)])
    return whole[: len(whole) // 2]


@pytest.mark.parametrize("name, data, says", [
    ("broken.tar.gz", truncated_tar_gz(), "corrupt tar archive"),
    ("garbage.tar.gz", b"this is not an archive at all\n" * 10, "corrupt tar archive"),
    ("nodata.deb", ar_bytes([("debian-binary", b"2.0\n")]), "no data.tar"),
    ("magic.deb", b"!<notar>\n" + b"x" * 80, "bad magic"),
    ("short.deb", deb_bytes([("file", "./a", SAFE)])[:-40], "truncated"),
])
def test_a_corrupt_archive_is_a_data_error_naming_it_and_leaves_nothing(tmp_path, name, data, says):
    archive, target = write(tmp_path, name, data), tmp_path / "dest" / "out"
    with pytest.raises(DataError, match=says) as info:
        extract(archive, target)
    assert not isinstance(info.value, UnsafeArchiveError) and str(archive) in str(info.value)
    assert_nothing_written(tmp_path, archive, target)

