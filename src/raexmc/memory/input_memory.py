"""The memory stage's folder: which training-input keys RAE searches. At keep 1 it holds memory.json alone (RAE
searches the index stage's index); otherwise also its own index, values.npz, counts.npy (the prior's n) and, for
exact, keys.npy; a compressed or prototype memory has its own labels/ too. kNN and the dual encoder never read it.
"""

from __future__ import annotations

import functools
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..errors import PARAMS_FILE, ConfigError, DataError
from ..io import atomic_dir, load_array, load_sparse, read_json, save_array, write_json
from ..settings import AUTO, MemorySection, NonNegative, Share, record_value
from .compression import NONE, checked_compression, parse_compression
from .indexes import INDEXED_KEY_SETS, make_index
from .key_selection import kept_count, select_keys
from .keys_values import KEYS_FILE, load_keys
from .merge import JointSearch
from .persistence import load_index, save_index
from .prior import log_prior
from .prototypes import label_prototypes, prototype_weight, searches_prototypes

MEMORY_FILE = "memory.json"
VALUES_FILE = "values.npz"
COUNTS_FILE = "counts.npy"
INDEX_FOLDER = "inputs"
LABELS_FOLDER = "labels"   # a compressed memory's, or one with label prototypes, own labels' index
FULL_INDEX = "index/inputs"   # what memory.json names when RAE searches the index stage's inputs' index
CHOICE_FILE = "memory_choice.json"   # the tune stage's: the keep and α the memory stage builds where they are auto


def own_index_folders(folder: str | os.PathLike) -> dict[str, Path]:
    """The indexes a memory folder holds of its own, by the index stage's key set each replaces for RAE."""
    folders = {key_set: Path(folder) / name for key_set, name in zip(INDEXED_KEY_SETS, (INDEX_FOLDER, LABELS_FOLDER))}
    return {key_set: path for key_set, path in folders.items() if path.is_dir()}


@dataclass(frozen=True)
class MemorySettings:
    """The `memory` section of params.yaml, checked."""

    keep: float
    method: str
    prior: bool
    seed: int
    compression: str = NONE
    prototypes: float = 0.0   # α of the label prototypes, resolved (0: the label texts' keys)

    @classmethod
    def from_section(cls, memory: MemorySection, backend: str, keep: float | None = None,
                     prototypes: float | None = None) -> MemorySettings:
        """The section for the resolved backend: a compression it cannot build fails here, before any selection."""
        keep = resolved_keep(memory) if keep is None else keep
        checked_compression(memory.compression, backend)
        return cls(keep, memory.method, memory.prior, memory.seed, memory.compression,
                   prototype_weight(memory.prototypes, keep, backend, prototypes))

    @property
    def full(self) -> bool:
        return self.keep == 1.0

    @property
    def needs_labels(self) -> bool:
        """Whether building reads the labels' keys: to compress, select by or make prototypes of them."""
        return (self.compression != NONE or self.prototypes > 0
                or (self.method == "kmeans-labels" and 0.0 < self.keep < 1.0))

    @property
    def needs_values(self) -> bool:
        """Whether building reads the inputs' value rows: to select keys, or to make prototypes."""
        return not self.full or self.prototypes > 0


def resolved_keep(memory: MemorySection, choice: str | os.PathLike | None = None) -> float:
    """`memory.keep`, or where it is auto the tune stage's choice, read from `choice` (its CHOICE_FILE)."""
    return memory.keep if memory.keep != AUTO else _chosen(choice, "keep", Share)


def chosen_memory(memory: MemorySection, backend: str, choice: str | os.PathLike | None = None) -> MemorySettings:
    """The memory the memory stage builds: the section with the tune stage's keep and α where they are auto."""
    keep = resolved_keep(memory, choice)
    searched = searches_prototypes(memory.prototypes, keep, backend)
    return MemorySettings.from_section(memory, backend, keep,
                                       _chosen(choice, "prototypes", NonNegative) if searched else None)


def _chosen(choice: str | os.PathLike | None, key: str, kind: Any) -> float:
    """`key` of the tune stage's choice file, checked: `memory.<key>` is auto."""
    if choice is None:
        raise ConfigError(f"memory.{key} auto is chosen by the tune stage: the memory stage needs its {CHOICE_FILE}",
                          PARAMS_FILE, f"memory.{key}")
    path = Path(choice)
    if not path.is_file():
        raise DataError(f"no chosen {key}: run the tune stage (memory.{key} is auto)", path)
    record = read_json(path)
    return record_value(kind, record.get(key) if isinstance(record, dict) else None, path, key)


def build_input_memory(train_inputs: np.ndarray, values: sp.csr_matrix | None, settings: MemorySettings,
                       out: str | os.PathLike, backend: str, labels: np.ndarray | None = None,
                       **index_settings) -> dict[str, Any]:
    """Select and index the keys, write the folder atomically and return memory.json's record."""
    meta: dict[str, Any] = {**asdict(settings), "num_inputs": len(train_inputs),
                            "input_keys": kept_count(settings.keep, len(train_inputs)), "index": FULL_INDEX}
    compressed = parse_compression(settings.compression) is not None
    if labels is None and settings.needs_labels:
        raise ValueError("a compressed memory, one whose keys kmeans-labels selects or one with label "
                         "prototypes needs the labels' keys")
    with atomic_dir(out) as folder:
        if not settings.full or compressed:
            keys = train_inputs
            if not settings.full:
                selected = select_keys(train_inputs, values, settings.keep, settings.method, settings.seed,
                                       progress=True, labels=labels)
                keys = selected.keys
                sp.save_npz(folder / VALUES_FILE, selected.values)
                save_array(folder / COUNTS_FILE, selected.counts)
            # hnswlib and faiss build no empty graph; nothing to search
            keys_backend, compression = (backend, settings.compression) if len(keys) else ("exact", NONE)
            save_index(make_index(keys_backend, keys, progress_label="memory keys", compression=compression,
                                  **index_settings), folder / INDEX_FOLDER)
            if keys_backend == "exact":
                save_array(folder / KEYS_FILE, keys)
            meta["index"] = INDEX_FOLDER
        if compressed or settings.prototypes > 0:
            label_keys = (labels if settings.prototypes == 0
                          else label_prototypes(train_inputs, values, labels, settings.prototypes))
            save_index(make_index(backend, label_keys, progress_label="memory labels",
                                  compression=settings.compression, **index_settings), folder / LABELS_FOLDER)
        write_json(folder / MEMORY_FILE, meta)
    return meta


class InputMemory:
    """A memory folder reopened: its settings, and what RAE's search and scores need from it."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self._own: JointSearch | None = None  # RAE's own indexes, loaded at the first search
        path = self.folder / MEMORY_FILE
        if not path.is_file():
            raise DataError(f"not a memory folder (no {MEMORY_FILE}): run the memory stage", self.folder)
        self.meta = read_json(path)
        missing = [k for k in ("keep", "method", "prior", "seed", "num_inputs", "input_keys", "index")
                   if not isinstance(self.meta, dict) or k not in self.meta]
        if missing:
            raise DataError(f"{MEMORY_FILE} lacks {', '.join(missing)}: rerun the memory stage", path)

    @property
    def full(self) -> bool:
        """Every training input is a key, with its values Y (keep = 1, compressed or not)."""
        return self.meta["keep"] == 1.0

    @property
    def compression(self) -> str:
        return self.meta.get("compression", NONE)  # memory folders written before compression existed lack it

    @property
    def prototypes(self) -> float:
        """α of its label prototypes (0: the label texts' keys)."""
        return self.meta.get("prototypes", 0.0)  # memory folders written before prototypes existed lack it

    def summary(self) -> dict[str, Any]:
        """What metrics.json and a predictor's settings.json record of this memory."""
        return {**{key: self.meta[key] for key in ("keep", "method", "prior", "input_keys")},
                "compression": self.compression, "prototypes": self.prototypes}

    def values(self, Y_values: sp.csr_matrix) -> sp.csr_matrix:
        """The values of RAE's input keys: `Y_values` (the full memory's) or the selected keys' own."""
        if self.full:
            return Y_values
        values = load_sparse(self.folder / VALUES_FILE)
        if values.shape != (self.meta["input_keys"], Y_values.shape[1]):
            raise DataError(f"{VALUES_FILE} has shape {values.shape}, expected "
                            f"({self.meta['input_keys']}, {Y_values.shape[1]})", self.folder)
        return values

    def log_counts(self) -> np.ndarray | None:
        """log n of every input key where the prior is on (prior.log_prior); None where it is off."""
        return self._log_prior

    @functools.cached_property
    def _log_prior(self) -> np.ndarray | None:  # evaluate searches a block at a time: the file is read once
        return log_prior(self.meta["prior"], None if self.full else load_array(self.folder / COUNTS_FILE))

    def own_keys(self) -> np.ndarray | None:
        """The selected keys when the exact backend indexes them (it keeps none); None otherwise."""
        path = self.folder / KEYS_FILE
        return load_keys(path) if path.is_file() else None

    def indexes(self, baselines: JointSearch | None, ef_search: int, threads: int = 0,
                device: str = "cpu") -> JointSearch:
        """RAE's two indexes, loaded once: this folder's own, else `baselines`' (the index stage's)."""
        if self._own is None:
            own = own_index_folders(self.folder)
            if baselines is None and len(own) < len(INDEXED_KEY_SETS):
                raise ValueError(f"{self.folder} searches the index stage's indexes too: pass them as baselines")
            keys = {"inputs": self.own_keys(), "labels": None}  # only selected input keys can lack an index's copy
            self._own = JointSearch(*(load_index(own[key_set], keys=keys[key_set], ef_search=ef_search, threads=threads,
                                                 device=device)
                                      if key_set in own else getattr(baselines, key_set)
                                      for key_set in INDEXED_KEY_SETS))
        return self._own
