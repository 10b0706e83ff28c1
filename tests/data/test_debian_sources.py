"""The FOLDOC and WordNet sources on the real Debian packages (needs `apt-get update` done once), and
from a Debian mirror's pool where apt-get is absent (a local file:// mirror here)."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from raexmc.data.catalogue import catalogue, catalogue_dir
from raexmc.data.dataset import Dataset
from raexmc.data.debian import DebPin, fetch_deb
from raexmc.data.sources import build_dataset
from raexmc.errors import ChecksumError, ConfigError, SourceError, UnsafeArchiveError
from test_archive import SAFE, deb_bytes
from tests.helpers import REPO

CATALOGUE = catalogue(catalogue_dir(REPO / "params.yaml"))


def test_foldoc_dataset_from_the_pinned_package(tmp_path):
    stats = build_dataset("foldoc", CATALOGUE["foldoc"], tmp_path / "foldoc", "")
    # design.md: about 10k entries with links, 11.8k label entries, about 4 labels per entry
    assert 11_000 < stats["L"] < 13_000
    assert 9_000 < stats["N_train"] + stats["N_test"] < 11_000
    assert 3.0 < stats["avg_labels_per_input"] < 5.0
    dataset = Dataset(tmp_path / "foldoc")
    assert dataset.stats == stats
    source = (tmp_path / "foldoc" / "source.json").read_text()
    assert "85a68ced9d611701a1398e2f0713e360" in source and "20230119-1" in source
    titles = {t.uid: t.title for t in dataset.texts("labels")}
    assert titles["awk"] == "awk"
    # every test input's own label is filtered (inputs are also labels)
    filt = dataset.filter_matrix("test")
    assert filt.nnz == stats["N_test"]


def test_a_checksum_mismatch_or_an_unsafe_cached_package_fails_without_output(tmp_path, monkeypatch):
    # an unpinned (no md5) package found in the cache is reused without downloading; one whose
    # data part escapes the extraction folder must be thrown out, not reused on every run
    monkeypatch.setenv("RAEXMC_CACHE", str(tmp_path / "cache"))
    spec = {**CATALOGUE["foldoc"], "package": {**CATALOGUE["foldoc"]["package"], "md5": "0" * 32}}
    with pytest.raises(ChecksumError, match="dict-foldoc=20230119-1.*does not match the pinned 0000"):
        build_dataset("foldoc", spec, tmp_path / "foldoc", "")
    assert not (tmp_path / "foldoc").exists()
    cached = tmp_path / "cache" / "debs" / "dict-foldoc_20230119-1.deb"
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(deb_bytes([("file", "./usr/ok.txt", SAFE), ("file", "../escaped.txt", SAFE)]))
    spec = {**CATALOGUE["foldoc"], "package": {"name": "dict-foldoc", "version": "20230119-1"}}
    with pytest.raises(UnsafeArchiveError, match="data.tar.xz:../escaped.txt"):
        build_dataset("foldoc", spec, tmp_path / "foldoc", "")
    assert not cached.exists(), "a rejected package must not stay cached"
    assert not (tmp_path / "foldoc").exists()


def test_distribution_version_is_recorded_and_one_neither_apt_nor_the_mirror_has_is_an_error_naming_both(
        tmp_path, download_cache):
    package = fetch_deb(DebPin("dict-foldoc", "distribution"), download_cache / "debs")
    assert package.version and len(package.md5) == 32 and len(package.sha256) == 64
    assert package.path.is_file()
    mirror = mirror_with(tmp_path / "mirror", {})
    with pytest.raises(SourceError) as refused:
        fetch_deb(DebPin("dict-foldoc", "0.0-nonexistent"), download_cache / "debs", mirror)
    line = refused.value.one_line()
    assert line.startswith("SourceError: dict-foldoc=0.0-nonexistent: apt-get download failed") and "\n" not in line
    assert f"not on the mirror either ({mirror}/pool/main/d/dict-foldoc/dict-foldoc_0.0-nonexistent_all.deb" in line


@pytest.mark.skipif(shutil.which("apt-get") is None, reason="needs apt-get")
def test_a_pinned_version_apt_lacks_comes_from_the_mirror_checked(tmp_path):
    """apt-get is installed but its sources offer no libtiny-data 1:2.1-3 (as a newer Debian's lack an old
    version): the mirror's pool serves it, checked against the pinned sha256 like any download."""
    mirror = mirror_with(tmp_path / "mirror", {TINY_POOL: TINY})
    package = fetch_deb(tiny_pin(sha256=hashlib.sha256(TINY).hexdigest()), tmp_path / "cache", mirror)
    assert package.path.read_bytes() == TINY and package.version == "1:2.1-3"
    with pytest.raises(ChecksumError):
        fetch_deb(tiny_pin(sha256="0" * 64), tmp_path / "cache2", mirror)


@pytest.mark.slow
def test_wordnet_dataset_from_the_pinned_package(tmp_path):
    stats = build_dataset("wordnet", CATALOGUE["wordnet"], tmp_path / "wordnet", "")
    # design.md: about 117k synsets, 117k labels, about 3 labels each
    assert stats["L"] == 117_659
    assert 100_000 < stats["N_train"] + stats["N_test"] < 117_659
    assert 2.0 < stats["avg_labels_per_input"] < 4.0


# --- where apt-get is absent: a mirror's pool ------------------------------------------------------

# the Filename fields that `apt-cache show dict-foldoc=20230119-1 wordnet-base=1:3.0-37` prints (bookworm)
POOL = {"foldoc": "pool/main/d/dict-foldoc/dict-foldoc_20230119-1_all.deb",
        "wordnet": "pool/main/w/wordnet/wordnet-base_3.0-37_all.deb"}
TINY = deb_bytes([("file", "./usr/share/tiny/data.txt", SAFE)])
TINY_POOL = "pool/main/libt/libtiny/libtiny-data_2.1-3_all.deb"  # a lib* source: a four-letter folder; epoch dropped


def hide_apt(monkeypatch) -> None:
    """PATH without the folders that hold apt-get, as on macOS or Fedora."""
    folders = [folder for folder in os.environ["PATH"].split(os.pathsep) if not (Path(folder) / "apt-get").exists()]
    monkeypatch.setenv("PATH", os.pathsep.join(folders))
    assert shutil.which("apt-get") is None


@pytest.fixture
def without_apt(monkeypatch):
    hide_apt(monkeypatch)


def mirror_with(root: Path, files: dict[str, bytes]) -> str:
    """A folder laid out like a Debian mirror holding `files` (pool path -> bytes); its file:// URL."""
    for pool_path, data in files.items():
        (root / pool_path).parent.mkdir(parents=True, exist_ok=True)
        (root / pool_path).write_bytes(data)
    return root.as_uri()


def tiny_pin(**checksums) -> DebPin:
    return DebPin("libtiny-data", "1:2.1-3", source="libtiny", **checksums)


def test_pool_paths_are_the_ones_debian_lists():
    for dataset, path in POOL.items():
        pin = DebPin(**{key: str(value) for key, value in CATALOGUE[dataset]["package"].items()})
        assert pin.pool_path() == path
    assert tiny_pin().pool_path() == TINY_POOL


def test_without_apt_the_default_dataset_comes_from_the_mirror(tmp_path, download_cache, monkeypatch):
    """The pinned dict-foldoc fetched by apt, laid out as a mirror; with apt-get hidden the dataset
    builds from it the same as with apt (the same source.json and stats)."""
    pin = DebPin(**{key: str(value) for key, value in CATALOGUE["foldoc"]["package"].items()})
    real = fetch_deb(pin, download_cache / "debs").path.read_bytes()
    from_apt = build_dataset("foldoc", CATALOGUE["foldoc"], tmp_path / "apt", "")
    mirror = mirror_with(tmp_path / "mirror", {POOL["foldoc"]: real})
    monkeypatch.setenv("RAEXMC_CACHE", str(tmp_path / "cache"))  # nothing cached: the mirror must serve it
    hide_apt(monkeypatch)
    from_mirror = build_dataset("foldoc", CATALOGUE["foldoc"], tmp_path / "mirror-built", "", mirror)
    assert from_mirror == from_apt
    assert (tmp_path / "mirror-built" / "source.json").read_text() == (tmp_path / "apt" / "source.json").read_text()
    cached = tmp_path / "cache" / "debs" / "dict-foldoc_20230119-1.deb"
    assert hashlib.sha256(cached.read_bytes()).hexdigest() == CATALOGUE["foldoc"]["package"]["sha256"]


def test_a_mirror_package_is_checked_then_reused_from_the_cache_and_one_it_lacks_is_a_source_error(tmp_path,
                                                                                                    without_apt):
    mirror_root = tmp_path / "mirror"
    pin = tiny_pin(sha256=hashlib.sha256(TINY).hexdigest(), md5=hashlib.md5(TINY).hexdigest())
    package = fetch_deb(pin, tmp_path / "cache", mirror_with(mirror_root, {TINY_POOL: TINY}) + "/")
    assert package.path.read_bytes() == TINY and package.version == "1:2.1-3"
    assert (package.sha256, package.md5) == (pin.sha256, pin.md5)
    shutil.rmtree(mirror_root)  # gone: the cached copy must serve
    assert fetch_deb(pin, tmp_path / "cache", mirror_root.as_uri()).path.read_bytes() == TINY
    mirror = mirror_with(tmp_path / "empty", {})
    with pytest.raises(SourceError, match=f"{mirror}/{TINY_POOL}: download failed"):
        fetch_deb(tiny_pin(), tmp_path / "cache2", mirror)
    with pytest.raises(SourceError, match="libtiny-data: version 'distribution' needs apt-get"):
        fetch_deb(DebPin("libtiny-data", "distribution"), tmp_path / "cache2", mirror)
    assert list((tmp_path / "cache2").iterdir()) == []


def test_the_dataset_refuses_a_mirror_package_of_another_sha256_in_one_line_leaving_nothing(tmp_path, without_apt,
                                                                                              monkeypatch):
    monkeypatch.setenv("RAEXMC_CACHE", str(tmp_path / "cache"))
    mirror = mirror_with(tmp_path / "mirror", {POOL["foldoc"]: TINY})  # not the pinned package
    with pytest.raises(ChecksumError) as refused:
        build_dataset("foldoc", CATALOGUE["foldoc"], tmp_path / "foldoc", "", mirror)
    assert refused.value.one_line() == (f"ChecksumError: {mirror}/{POOL['foldoc']}: sha256 "
                                        f"{hashlib.sha256(TINY).hexdigest()} does not match the pinned "
                                        f"{CATALOGUE['foldoc']['package']['sha256']}")
    assert not (tmp_path / "foldoc").exists()
    assert list((tmp_path / "cache" / "debs").iterdir()) == []


def test_a_package_entry_with_an_unknown_key_is_refused():
    spec = {**CATALOGUE["foldoc"], "package": {**CATALOGUE["foldoc"]["package"], "sha265": "0" * 64}}
    with pytest.raises(ConfigError, match=r"datasets/foldoc.yaml:package: unknown key 'sha265'"):
        build_dataset("foldoc", spec, "unused", "")
