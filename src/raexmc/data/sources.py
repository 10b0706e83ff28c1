"""The dataset folder of a named dataset from its source: foldoc, wordnet and wordnet-hypernyms (pinned Debian
packages), local (LF or NGAME layout), xc-repo (the paper's archives from Google Drive, with gdown, which passes the
confirmation page and resumes a partial file) and synthetic."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from ..errors import ConfigError, DataError, SourceError
from ..io import verify
from .archive import extract
from .catalogue import EntryCheck, entry_file
from .dataset import write_dataset
from .debian import DEBIAN_MIRROR, deb_pin, fetch_deb
from .foldoc import read_foldoc
from .layouts import read_layout
from .linked import write_linked_corpus
from .synthetic import write_synthetic
from .wordnet import read_wordnet, write_hypernym_dataset

WORDNET_DIR = "usr/share/wordnet"  # inside the wordnet-base package


def cache_dir() -> Path:
    """Downloads kept across runs: $RAEXMC_CACHE or ~/.cache/raexmc."""
    folder = Path(os.environ.get("RAEXMC_CACHE") or Path.home() / ".cache" / "raexmc")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _require(spec: dict[str, Any], key: str, name: str) -> Any:
    if key not in spec or spec[key] in (None, ""):
        raise ConfigError(f"dataset '{name}' needs '{key}'", entry_file(name), key)
    return spec[key]


def _extract_download(archive: Path, target: Path) -> Path:
    """Extract a cached download; one rejected as unsafe or corrupt is removed, so the next run fetches it again."""
    try:
        return extract(archive, target)
    except DataError:
        archive.unlink(missing_ok=True)
        raise


# The keys of each Debian-built source's entry (seed and test_fraction split it: linked.seeded_split).
DEBIAN_KEYS = {"foldoc": ("package", "seed", "test_fraction"),
               "wordnet": ("package", "pointers", "seed", "test_fraction"),
               "wordnet-hypernyms": ("package", "min_depth", "max_depth", "seed", "test_fraction")}
SOURCES = (*DEBIAN_KEYS, "local", "xc-repo", "synthetic")


def _write_debian_built(name: str, spec: dict[str, Any], target: Path, workdir: Path, mirror: str) -> dict[str, Any]:
    """A corpus from the entry's pinned Debian package, fetched once its settings are checked."""
    kind = spec["source"]
    check = EntryCheck(name, spec, kind, DEBIAN_KEYS[kind], {"seed": 0, "test_fraction": 0.2})
    settings = {}
    if kind == "wordnet-hypernyms":
        settings["min_depth"] = check.integer("min_depth", 0)
        settings["max_depth"] = check.integer("max_depth", settings["min_depth"])
    settings.update(seed=check.integer("seed", 0), test_fraction=check.fraction("test_fraction"))
    pin = deb_pin(_require(spec, "package", name), entry_file(name), "package")
    deb = fetch_deb(pin, cache_dir() / "debs", mirror)
    unpacked = _extract_download(deb.path, workdir / "deb")
    source = {"name": name, "source": kind, **settings, "package": deb.provenance()}
    if kind == "wordnet-hypernyms":
        return write_hypernym_dataset(unpacked / WORDNET_DIR, target, name, source)
    if kind == "foldoc":
        dictd = unpacked / "usr/share/dictd"
        entries = read_foldoc(dictd / "foldoc.index", dictd / "foldoc.dict.dz")
    else:
        pointers = spec.get("pointers", "semantic")
        entries = read_wordnet(unpacked / WORDNET_DIR, None if pointers == "semantic" else set(pointers))
    return write_linked_corpus(target, entries, source)


def _write_layout(name: str, folder: Path, target: Path, provenance: dict[str, Any]) -> dict[str, Any]:
    reader = read_layout(folder)
    source = {"name": name, "layout": reader.layout, **provenance,
              **{f"{role}_file": path for role, path in reader.files.items()}}
    origins = {split: str(folder / f"filter_labels_{split}.txt") for split in reader.filters}
    return write_dataset(target, reader.labels, reader.train, reader.test, reader.filters, source, origins)


def fetch_archive(url: str, target: Path, sha256: str | None) -> str:
    """Download `url` to `target` (resuming); its sha256, checked against a pinned one (a mismatch removed)."""
    import gdown

    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.is_file():
        try:
            result = gdown.download(url, str(target), quiet=False, resume=True, retries=2)
        except Exception as exc:  # gdown raises several unrelated types for network failures
            raise SourceError(f"download failed ({type(exc).__name__}: {exc})", url) from None
        if result is None or not target.is_file():
            raise SourceError("download failed (no file received)", url)
    try:
        return verify(target, sha256, "sha256")
    except Exception:
        target.unlink(missing_ok=True)
        raise


def _find_dataset_folder(root: Path) -> Path:
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
        raise ConfigError(f"unknown source '{source}' (choose from {', '.join(SOURCES)})", entry_file(name), "source")
    target = Path(target)
    if source == "synthetic":
        return write_synthetic(name, spec, target)
    with tempfile.TemporaryDirectory(prefix="raexmc-download-") as tmp:
        workdir = Path(tmp)
        if source in DEBIAN_KEYS:
            return _write_debian_built(name, spec, target, workdir, debian_mirror)
        if source == "local":
            folder = EntryCheck(name, spec, "local", ("path",), {}).path("path")
            return _write_layout(name, folder, target, {"source": "local", "path": str(folder)})
        url = xc_repo_url + str(_require(spec, "archive_id", name))
        archive = cache_dir() / "xc-repo" / f"{name}{spec.get('archive_suffix', '.zip')}"
        sha256 = fetch_archive(url, archive, spec.get("sha256"))
        unpacked = _extract_download(archive, workdir / "archive")
        return _write_layout(name, _find_dataset_folder(unpacked), target,
                             {"source": "xc-repo", "url": url, "sha256": sha256})
