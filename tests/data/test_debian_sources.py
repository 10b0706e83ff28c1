"""The FOLDOC and WordNet sources on the real Debian packages (needs `apt-get update` done once)."""

from __future__ import annotations

import pytest

from raexmc.data.dataset import Dataset
from raexmc.data.debian import fetch_deb
from raexmc.data.sources import build_dataset
from raexmc.errors import ChecksumError, SourceError, UnsafeArchiveError
from raexmc.params import load_params

from conftest import REPO
from test_archive import SAFE, deb_bytes

CATALOGUE = load_params(REPO / "params.yaml").section("datasets")


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


def test_checksum_mismatch_fails_without_output(tmp_path):
    spec = {**CATALOGUE["foldoc"], "package": {**CATALOGUE["foldoc"]["package"], "md5": "0" * 32}}
    with pytest.raises(ChecksumError, match="dict-foldoc=20230119-1.*does not match the pinned 0000"):
        build_dataset("foldoc", spec, tmp_path / "foldoc", "")
    assert not (tmp_path / "foldoc").exists()


def test_unsafe_cached_package_is_removed_from_the_cache(tmp_path, monkeypatch):
    # an unpinned (no md5) package found in the cache is reused without downloading; one whose
    # data part escapes the extraction folder must be thrown out, not reused on every run
    monkeypatch.setenv("RAEXMC_CACHE", str(tmp_path / "cache"))
    cached = tmp_path / "cache" / "debs" / "dict-foldoc_20230119-1.deb"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(deb_bytes([("file", "./usr/ok.txt", SAFE), ("file", "../escaped.txt", SAFE)]))
    spec = {**CATALOGUE["foldoc"], "package": {"name": "dict-foldoc", "version": "20230119-1"}}
    with pytest.raises(UnsafeArchiveError, match="data.tar.xz:../escaped.txt"):
        build_dataset("foldoc", spec, tmp_path / "foldoc", "")
    assert not cached.exists(), "a rejected package must not stay cached"
    assert not (tmp_path / "foldoc").exists()


def test_distribution_version_is_recorded(tmp_path, download_cache):
    package = fetch_deb("dict-foldoc", "distribution", None, download_cache / "debs")
    assert package.version and len(package.md5) == 32 and len(package.sha256) == 64
    assert package.path.is_file()


def test_unknown_package_version_is_a_source_error(tmp_path, download_cache):
    with pytest.raises(SourceError, match="dict-foldoc=0.0-nonexistent"):
        fetch_deb("dict-foldoc", "0.0-nonexistent", None, download_cache / "debs")


@pytest.mark.slow
def test_wordnet_dataset_from_the_pinned_package(tmp_path):
    stats = build_dataset("wordnet", CATALOGUE["wordnet"], tmp_path / "wordnet", "")
    # design.md: about 117k synsets, 117k labels, about 3 labels each
    assert stats["L"] == 117_659
    assert 100_000 < stats["N_train"] + stats["N_test"] < 117_659
    assert 2.0 < stats["avg_labels_per_input"] < 4.0
