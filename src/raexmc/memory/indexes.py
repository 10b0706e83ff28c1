"""The index stage's folder: an index of the training inputs and one of the labels, each key stored once."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from ..encoder.vectors import load_embeddings
from ..errors import PARAMS_FILE
from ..io import atomic_dir
from ..settings import AUTO, SearchSettings
from .compression import NONE, checked_compression, parse_compression
from .exact import ExactIndex
from .faiss_index import FaissIndex, build_faiss
from .hnsw import PAPER_EF_CONSTRUCTION, PAPER_EF_SEARCH, PAPER_M, HnswIndex, build_hnsw, hnsw_estimate
from .keys_values import KEY_SETS, memory_keys
from .merge import JointSearch
from .milvus import MilvusIndex, build_milvus
from .persistence import load_index, save_index, saved_meta
from .search import EXACT_MAX_KEYS

# The key sets that get an index, in joint-id order: the joint search merges them.
INDEXED_KEY_SETS = ("inputs", "labels")


def resolve_backend(setting: str, key_count: int, device: str = "cpu") -> str:
    """`index.backend` for `key_count` joint keys searched on `device`: auto is exact on a GPU and up to
    EXACT_MAX_KEYS on the CPU, hnsw above."""
    if setting == AUTO:
        return "exact" if device.startswith("cuda") or key_count <= EXACT_MAX_KEYS else "hnsw"
    return setting


def search_device(search: SearchSettings) -> str:
    """`search.device` as a torch device (auto: the GPU if one is visible), or ConfigError naming the key."""
    from ..encoder.device import pick_device  # torch only where a GPU driver is (device.gpu_visible)

    return pick_device(search.device, PARAMS_FILE, "search.device")


def backend_for(setting: str, embeddings: str | os.PathLike, device: str = "cpu") -> str:
    """`index.backend` resolved for the embed stage's joint keys (counted from the arrays' headers), so the
    index, memory and tune stages agree."""
    return resolve_backend(setting, sum(len(load_embeddings(embeddings, split)) for split in KEY_SETS["joint"]), device)


def make_index(backend: str, keys: np.ndarray, M: int = PAPER_M, ef_construction: int = PAPER_EF_CONSTRUCTION,
               threads: int = 0, seed: int = 0, ef_search: int = PAPER_EF_SEARCH,
               progress: bool = True, progress_label: str = "keys",
               compression: str = NONE, **milvus) -> ExactIndex | HnswIndex | FaissIndex | MilvusIndex:
    """The index `index.backend` and `memory.compression` name (compressed: a faiss graph; milvus: a collection at
    `milvus`'s uri, token_env and index_type, milvus.py) over `keys`."""
    compressed = checked_compression(compression, backend)
    graph = dict(M=M, ef_construction=ef_construction, ef_search=ef_search, progress=progress,
                 progress_label=progress_label)
    if compressed is not None:
        return build_faiss(keys, compressed, threads=threads, seed=seed, **graph)
    if backend == "exact":
        return ExactIndex(keys)
    if backend == "milvus":
        return build_milvus(keys, **graph, **milvus)
    if backend != "hnsw":
        raise ValueError(f"unknown index backend {backend!r}")
    return build_hnsw(keys, threads=threads, seed=seed, **graph)


def index_folder(index: str | os.PathLike, key_set: str) -> Path:
    """Where the index stage keeps the index over `key_set`."""
    return Path(index) / key_set


def build_memory_indexes(embeddings: str | os.PathLike, out: str | os.PathLike, backend: str,
                         key_sets: tuple[str, ...] = INDEXED_KEY_SETS, **index_settings) -> dict[str, dict[str, float]]:
    """Build and save the index of each key set under `out`, all or none; per key set its keys and build seconds."""
    built = {}
    with atomic_dir(out) as folder:
        for key_set in key_sets:
            keys = memory_keys(embeddings, key_set)
            if backend == "hnsw" and parse_compression(index_settings.get("compression", NONE)) is None:
                print(hnsw_estimate(key_set, keys.shape, index_settings.get("M", PAPER_M)), flush=True)
            started = time.perf_counter()
            index = make_index(backend, keys, progress_label=key_set, **index_settings)
            built[key_set] = {"keys": len(keys), "build_s": round(time.perf_counter() - started, 2)}
            save_index(index, folder / key_set)
            del index, keys  # one key set in memory at a time
    return built


def memory_backend(index: str | os.PathLike) -> str:
    """The backend the index stage used ("exact" keeps no keys: loading it needs them)."""
    return saved_meta(index_folder(index, INDEXED_KEY_SETS[0]))["backend"]


def load_joint_search(index: str | os.PathLike, keys: np.ndarray | None = None, ef_search: int = PAPER_EF_SEARCH,
                      threads: int = 0, inputs: str | os.PathLike | None = None,
                      labels: str | os.PathLike | None = None, device: str = "cpu") -> JointSearch:
    """The joint search over the index stage's folder (or `inputs` / `labels` in place of its own: a smaller or
    compressed memory's). An exact index needs the joint `keys`, split without a copy, and searches on `device`."""
    folders = [Path(inputs) if inputs is not None else index_folder(index, INDEXED_KEY_SETS[0]),
               Path(labels) if labels is not None else index_folder(index, INDEXED_KEY_SETS[1])]
    parts = (None, None) if keys is None else np.split(keys, [saved_meta(folders[0])["count"]])
    return JointSearch(*(load_index(folder, keys=part, ef_search=ef_search, threads=threads, device=device)
                         for folder, part in zip(folders, parts)))
