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


# --- builders ------------------------------------------------------------------------------------

def _file_info(name: str, data: bytes) -> tuple[tarfile.TarInfo, io.BytesIO]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    return info, io.BytesIO(data)


def _link_info(name: str, target: str, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    info.mode = 0o777 if kind == tarfile.SYMTYPE else 0o644
    return info


def tar_bytes(members: list[tuple], mode: str = "w:gz") -> bytes:
    """members: ("file", name, data) | ("dir", name) | ("sym"/"hard", name, target) | ("fifo", name)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode, format=tarfile.GNU_FORMAT) as archive:
        for kind, name, *rest in members:
            if kind == "file":
                archive.addfile(*_file_info(name, rest[0]))
            elif kind == "dir":
                info = tarfile.TarInfo(name)
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                archive.addfile(info)
            elif kind == "sym":
                archive.addfile(_link_info(name, rest[0], tarfile.SYMTYPE))
            elif kind == "hard":
                archive.addfile(_link_info(name, rest[0], tarfile.LNKTYPE))
            elif kind == "fifo":
                info = tarfile.TarInfo(name)
                info.type = tarfile.FIFOTYPE
                archive.addfile(info)
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
    """A Unix `ar` archive, written by hand: magic, then a 60-byte header and a body per member."""
    out = bytearray(b"!<arch>\n")
    for name, body in members:
        header = (f"{name + '/':<16}" f"{0:<12}" f"{0:<6}" f"{0:<6}" f"{'100644':<8}"
                  f"{len(body):<10}").encode("ascii")
        header += b"`\n"
        assert len(header) == 60
        out += header + body
        if len(body) % 2:
            out += b"\n"
    return bytes(out)


def deb_bytes(data_members: list[tuple]) -> bytes:
    control = tar_bytes([("file", "./control", b"Package: tiny\nVersion: 1.0\n")], mode="w:xz")
    data = tar_bytes(data_members, mode="w:xz")
    return ar_bytes([("debian-binary", b"2.0\n"), ("control.tar.xz", control), ("data.tar.xz", data)])


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    folder = tmp_path / "src"
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_bytes(data)
    return path


def all_paths(root: Path) -> set[str]:
    """Every path under `root`, hidden ones (atomic_dir's temp folders) included."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def assert_nothing_written(tmp_path: Path, archive: Path, target: Path) -> None:
    """Only the archive (and the empty parent atomic_dir made) may exist under tmp_path."""
    assert not target.exists()
    assert list(target.parent.iterdir()) == [], "temporary folders left beside the target"
    expected = {"src", str(archive.relative_to(tmp_path)), str(target.parent.relative_to(tmp_path))}
    assert all_paths(tmp_path) == expected


# --- valid archives ------------------------------------------------------------------------------

def test_tar_gz_extracts_files_dirs_and_inner_links(tmp_path):
    archive = write(tmp_path, "data.tar.gz", tar_bytes([
        ("dir", "pkg"),
        ("file", "pkg/a.txt", b"alpha\n"),
        ("file", "pkg/sub/b.txt", b"beta\n"),
        ("sym", "pkg/sub/link", "../a.txt"),
        ("hard", "pkg/hard", "pkg/a.txt"),
    ]))
    target = tmp_path / "dest" / "out"
    assert extract(archive, target) == target
    assert (target / "pkg/a.txt").read_bytes() == b"alpha\n"
    assert (target / "pkg/sub/b.txt").read_bytes() == b"beta\n"
    assert (target / "pkg/sub/link").is_symlink()
    assert (target / "pkg/sub/link").read_bytes() == b"alpha\n"
    assert (target / "pkg/hard").read_bytes() == b"alpha\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out"]  # no temp folder left


def test_plain_tar_and_tar_xz(tmp_path):
    for name, mode in (("plain.tar", "w"), ("packed.tar.xz", "w:xz"), ("packed.tar.bz2", "w:bz2")):
        archive = write(tmp_path, name, tar_bytes([("file", "x/y.txt", b"why\n")], mode=mode))
        target = tmp_path / "dest" / name
        extract(archive, target)
        assert (target / "x/y.txt").read_bytes() == b"why\n"


def test_zip_extracts(tmp_path):
    archive = write(tmp_path, "data.zip", zip_bytes([
        ("file", "LF-Tiny/trn.txt", b"train\n"),
        ("file", "LF-Tiny/deep/tst.txt", b"test\n"),
    ]))
    target = tmp_path / "dest" / "out"
    extract(archive, target)
    assert (target / "LF-Tiny/trn.txt").read_bytes() == b"train\n"
    assert (target / "LF-Tiny/deep/tst.txt").read_bytes() == b"test\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out"]


def test_deb_extracts_its_data_part_only(tmp_path):
    deb = write(tmp_path, "tiny_1.0_all.deb", deb_bytes([
        ("dir", "./usr"),
        ("file", "./usr/share/tiny/words.txt", b"one\ntwo\n"),
        ("sym", "./usr/share/tiny/alias.txt", "words.txt"),
    ]))
    members = ar_members(deb)
    assert list(members) == ["debian-binary", "control.tar.xz", "data.tar.xz"]
    assert members["debian-binary"] == b"2.0\n"
    target = tmp_path / "dest" / "out"
    extract(deb, target)
    assert (target / "usr/share/tiny/words.txt").read_bytes() == b"one\ntwo\n"
    assert (target / "usr/share/tiny/alias.txt").read_bytes() == b"one\ntwo\n"
    assert not (target / "control").exists()  # the control part is not unpacked


def test_replaces_an_existing_target_whole(tmp_path):
    target = tmp_path / "dest" / "out"
    target.mkdir(parents=True)
    (target / "stale.txt").write_text("old")
    archive = write(tmp_path, "new.tar.gz", tar_bytes([("file", "fresh.txt", b"new\n")]))
    extract(archive, target)
    assert sorted(p.name for p in target.iterdir()) == ["fresh.txt"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["out"]


# --- unsafe archives -----------------------------------------------------------------------------

def _unsafe_tar_cases(tmp_path: Path) -> dict[str, tuple[list[tuple], str]]:
    outside_abs = str(tmp_path / "escaped-abs.txt")
    return {
        "absolute-path": ([("file", outside_abs, b"pwned\n")], outside_abs),
        "dotdot": ([("file", "../escaped.txt", b"pwned\n")], "../escaped.txt"),
        "dotdot-deep": ([("file", "a/b/../../../escaped.txt", b"pwned\n")], "a/b/../../../escaped.txt"),
        "symlink-absolute": ([("sym", "link", outside_abs)], "link"),
        "symlink-relative": ([("sym", "link", "../..")], "link"),
        "symlink-nested-relative": ([("dir", "sub"), ("sym", "sub/link", "../../escaped.txt")], "sub/link"),
        "hardlink-dotdot": ([("hard", "hard", "../escaped.txt")], "hard"),
        "hardlink-absolute": ([("hard", "hard", outside_abs)], "hard"),
        "fifo": ([("fifo", "pipe")], "pipe"),
    }


@pytest.mark.parametrize("case", ["absolute-path", "dotdot", "dotdot-deep", "symlink-absolute", "symlink-relative",
                                  "symlink-nested-relative", "hardlink-dotdot", "hardlink-absolute", "fifo"])
def test_unsafe_tar_member_rejects_whole_archive(tmp_path, case):
    bad_members, member = _unsafe_tar_cases(tmp_path)[case]
    archive = write(tmp_path, "evil.tar.gz", tar_bytes([("file", "ok.txt", SAFE), *bad_members]))
    target = tmp_path / "dest" / "out"
    with pytest.raises(UnsafeArchiveError) as info:
        extract(archive, target)
    message = str(info.value)
    assert str(archive) in message
    assert member in message
    assert info.value.record == member
    assert_nothing_written(tmp_path, archive, target)


@pytest.mark.parametrize("case", ["dotdot", "symlink-relative", "hardlink-absolute"])
def test_unsafe_member_in_deb_data_part(tmp_path, case):
    bad_members, member = _unsafe_tar_cases(tmp_path)[case]
    deb = write(tmp_path, "evil_1.0_all.deb", deb_bytes([("file", "./usr/ok.txt", SAFE), *bad_members]))
    target = tmp_path / "dest" / "out"
    with pytest.raises(UnsafeArchiveError) as info:
        extract(deb, target)
    message = str(info.value)
    assert str(deb) in message and "data.tar.xz" in message
    assert member in message
    assert_nothing_written(tmp_path, deb, target)


@pytest.mark.parametrize("bad, member", [
    (("file", "../escaped.txt", b"pwned\n"), "../escaped.txt"),
    (("file", "dir/../../escaped.txt", b"pwned\n"), "dir/../../escaped.txt"),
    (("file", "/abs-escaped.txt", b"pwned\n"), "/abs-escaped.txt"),
    (("sym", "link", "/etc/passwd"), "link"),
    (("sym", "innocent-link", "ok.txt"), "innocent-link"),  # any zip symlink is refused
])
def test_unsafe_zip_member_rejects_whole_archive(tmp_path, bad, member):
    archive = write(tmp_path, "evil.zip", zip_bytes([("file", "ok.txt", SAFE), bad]))
    assert [i.filename for i in zipfile.ZipFile(archive).infolist()][-1] == member  # stored as written
    target = tmp_path / "dest" / "out"
    with pytest.raises(UnsafeArchiveError) as info:
        extract(archive, target)
    message = str(info.value)
    assert str(archive) in message and member in message
    assert_nothing_written(tmp_path, archive, target)


def test_failed_extraction_leaves_existing_target_untouched(tmp_path):
    target = tmp_path / "dest" / "out"
    target.mkdir(parents=True)
    (target / "keep.txt").write_text("keep")
    archive = write(tmp_path, "evil.tar.gz", tar_bytes([("file", "ok.txt", SAFE), ("file", "../x", SAFE)]))
    with pytest.raises(UnsafeArchiveError):
        extract(archive, target)
    assert sorted(p.name for p in target.parent.iterdir()) == ["out"]
    assert sorted(p.name for p in target.iterdir()) == ["keep.txt"]


# --- corrupt and missing -------------------------------------------------------------------------

def test_truncated_tar_gz_is_a_data_error(tmp_path):
    # incompressible content, so the gzip stream is long and cutting it breaks a member
    payload = bytes((i * 7919 + (i >> 3) * 104729) % 251 for i in range(200_000))
    whole = tar_bytes([("file", "first.bin", payload), ("file", "second.bin", payload)])
    archive = write(tmp_path, "broken.tar.gz", whole[: len(whole) // 2])
    target = tmp_path / "dest" / "out"
    with pytest.raises(DataError) as info:
        extract(archive, target)
    assert not isinstance(info.value, UnsafeArchiveError)
    assert str(archive) in str(info.value)
    assert_nothing_written(tmp_path, archive, target)


def test_garbage_file_is_a_data_error(tmp_path):
    archive = write(tmp_path, "garbage.tar.gz", b"this is not an archive at all\n" * 10)
    target = tmp_path / "dest" / "out"
    with pytest.raises(DataError) as info:
        extract(archive, target)
    assert str(archive) in str(info.value)
    assert_nothing_written(tmp_path, archive, target)


def test_missing_archive_is_a_data_error(tmp_path):
    missing = tmp_path / "nowhere.tar.gz"
    target = tmp_path / "dest" / "out"
    with pytest.raises(DataError) as info:
        extract(missing, target)
    assert str(missing) in str(info.value)
    assert "not found" in str(info.value)
    assert not target.exists()


def test_deb_without_data_part_or_with_bad_magic(tmp_path):
    no_data = write(tmp_path, "nodata.deb", ar_bytes([("debian-binary", b"2.0\n")]))
    with pytest.raises(DataError, match="no data.tar"):
        extract(no_data, tmp_path / "dest" / "a")
    bad_magic = write(tmp_path, "magic.deb", b"!<notar>\n" + b"x" * 80)
    with pytest.raises(DataError, match="bad magic") as info:
        extract(bad_magic, tmp_path / "dest" / "b")
    assert str(bad_magic) in str(info.value)
    truncated = write(tmp_path, "short.deb", deb_bytes([("file", "./a", SAFE)])[:-40])
    with pytest.raises(DataError, match="truncated"):
        extract(truncated, tmp_path / "dest" / "c")
    assert list((tmp_path / "dest").iterdir()) == []
