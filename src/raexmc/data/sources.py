"""Build the normalised dataset folder of a named dataset from its source: foldoc and wordnet (pinned
Debian packages), wordnet-hypernyms, local (LF or NGAME layout), xc-repo (the paper's archives) and synthetic.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from ..errors import ConfigError, DataError
from .archive import extract
from .catalogue import entry_file
from .dataset import write_dataset
from .debian import DEBIAN_MIRROR, deb_pin, fetch_deb
from .entry_check import EntryCheck
from .foldoc import read_foldoc
from .layouts import read_layout
from .linked import LinkedEntry, split_linked_corpus
from .synthetic import write_synthetic
from .wordnet import read_wordnet
from .wordnet_hypernyms import parse_hypernym_settings, write_hypernym_dataset
from .xcrepo import fetch_archive

SOURCES = ("foldoc", "wordnet", "wordnet-hypernyms", "local", "xc-repo", "synthetic")
WORDNET_DIR = "usr/share/wordnet"  # inside the wordnet-base package


def cache_dir() -> Path:
    """Downloads kept across runs (Debian packages, archives): $RAEXMC_CACHE or ~/.cache/raexmc."""
    folder = Path(os.environ.get("RAEXMC_CACHE") or Path.home() / ".cache" / "raexmc")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _require(spec: dict[str, Any], key: str, name: str) -> Any:
    if key not in spec or spec[key] in (None, ""):
        raise ConfigError(f"dataset '{name}' needs '{key}'", entry_file(name), key)
    return spec[key]


def _extract_download(archive: Path, target: Path) -> Path:
    """Extract a cached download; one rejected as unsafe or corrupt is removed from the cache, so
    the next run fetches it again instead of reusing it as if it were good."""
    try:
        return extract(archive, target)
    except DataError:
        archive.unlink(missing_ok=True)
        raise


def _unpack_package(name: str, spec: dict[str, Any], workdir: Path, mirror: str) -> tuple[Path, dict[str, Any]]:
    """The entry's pinned Debian package fetched (from `mirror` without apt-get) and unpacked; (folder, provenance)."""
    pin = deb_pin(_require(spec, "package", name), entry_file(name), "package")
    deb = fetch_deb(pin, cache_dir() / "debs", mirror)
    return _extract_download(deb.path, workdir / "deb"), {"package": deb.provenance()}


def _linked_entries(name: str, spec: dict[str, Any], workdir: Path,
                    mirror: str) -> tuple[list[LinkedEntry], dict[str, Any]]:
    unpacked, provenance = _unpack_package(name, spec, workdir, mirror)
    if spec["source"] == "foldoc":
        dictd = unpacked / "usr/share/dictd"
        entries = read_foldoc(dictd / "foldoc.index", dictd / "foldoc.dict.dz")
    else:
        pointers = spec.get("pointers", "semantic")
        entries = read_wordnet(unpacked / WORDNET_DIR, None if pointers == "semantic" else set(pointers))
    return entries, provenance


# The keys of a linked corpus's entry (seed and test_fraction split it: linked.seeded_split).
LINKED_KEYS = {"foldoc": ("package", "seed", "test_fraction"),
               "wordnet": ("package", "pointers", "seed", "test_fraction")}


def _write_linked(name: str, spec: dict[str, Any], target: Path, workdir: Path, mirror: str) -> dict[str, Any]:
    check = EntryCheck(name, spec, spec["source"], LINKED_KEYS[spec["source"]], {"seed": 0, "test_fraction": 0.2})
    seed, fraction = check.integer("seed", 0), check.fraction("test_fraction")  # before the download
    entries, provenance = _linked_entries(name, spec, workdir, mirror)
    corpus = split_linked_corpus(entries, seed, fraction)
    source = {"name": name, "source": spec["source"], "seed": seed, "test_fraction": fraction, **provenance}
    return write_dataset(target, corpus.labels, corpus.train, corpus.test, corpus.filters, source)


def _write_wordnet_hypernyms(name: str, spec: dict[str, Any], target: Path, workdir: Path,
                             mirror: str) -> dict[str, Any]:
    settings = parse_hypernym_settings(name, spec)  # before the download
    unpacked, provenance = _unpack_package(name, spec, workdir, mirror)
    return write_hypernym_dataset(unpacked / WORDNET_DIR, settings, target,
                                  {"name": name, "source": spec["source"], **provenance}, name)


def _write_layout(name: str, folder: Path, target: Path, provenance: dict[str, Any]) -> dict[str, Any]:
    reader = read_layout(folder)
    source = {"name": name, "layout": reader.layout, **provenance,
              **{f"{role}_file": path for role, path in reader.files.items()}}
    origins = {split: str(folder / f"filter_labels_{split}.txt") for split in reader.filters}
    return write_dataset(target, reader.labels, reader.train, reader.test, reader.filters, source, origins)


def _find_dataset_folder(root: Path) -> Path:
    """The folder inside an unpacked archive that holds the dataset files."""
    for marker in ("trn.json.gz", "trn_X.txt"):
        hits = sorted(root.rglob(marker))
        if hits:
            return hits[0].parent
    raise DataError("archive holds no trn.json.gz or trn_X.txt", root)


def build_dataset(name: str, spec: dict[str, Any], target: str | Path, xc_repo_url: str,
                  debian_mirror: str = DEBIAN_MIRROR) -> dict[str, Any]:
    """Write dataset `name` (its catalogue entry `spec`) to `target`; Debian packages from `debian_mirror`."""
    source = _require(spec, "source", name)
    if source not in SOURCES:
        raise ConfigError(f"unknown source '{source}' (choose from {', '.join(SOURCES)})",
                          entry_file(name), "source")
    target = Path(target)
    if source == "synthetic":
        return write_synthetic(name, spec, target)
    with tempfile.TemporaryDirectory(prefix="raexmc-download-") as tmp:
        workdir = Path(tmp)
        if source in ("foldoc", "wordnet"):
            return _write_linked(name, spec, target, workdir, debian_mirror)
        if source == "wordnet-hypernyms":
            return _write_wordnet_hypernyms(name, spec, target, workdir, debian_mirror)
        if source == "local":
            folder = EntryCheck(name, spec, "local", ("path",), {}).path("path")
            return _write_layout(name, folder, target, {"source": "local", "path": str(folder)})
        archive = fetch_archive(xc_repo_url + str(_require(spec, "archive_id", name)),
                                cache_dir() / "xc-repo" / f"{name}{spec.get('archive_suffix', '.zip')}",
                                spec.get("sha256"))
        unpacked = _extract_download(archive.path, workdir / "archive")
        return _write_layout(name, _find_dataset_folder(unpacked), target,
                             {"source": "xc-repo", "url": archive.url, "sha256": archive.sha256})
