"""The package stage's model folder (also build_model's). Predict and serve search on the CPU, so where the index
stage kept exact indexes for a GPU, the package stage builds the HNSW graphs: an evaluation never waits for them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..data.dataset import Dataset
from ..data.label_records import LabelRecords, write_label_records
from ..io import scratch_dir
from ..memory.indexes import INDEXED_KEY_SETS, backend_for, build_memory_indexes, load_joint_search, memory_backend
from ..memory.input_memory import InputMemory, own_index_folders
from ..memory.keys_values import memory_keys, training_values
from ..memory.merge import JointSearch
from .model import RaeModel, RaeSettings


def index_key_sets_read(memory: str | os.PathLike) -> tuple[str, ...]:
    """The index stage's key sets whose index a model over `memory` searches: those it has none of its own for."""
    own = own_index_folders(memory)
    return tuple(key_set for key_set in INDEXED_KEY_SETS if key_set not in own)


def graphs_to_build(index: str | os.PathLike, memory: str | os.PathLike, setting: str,
                    embeddings: str | os.PathLike) -> tuple[str, ...]:
    """The index stage's key sets whose HNSW graph the package stage builds: all where that stage kept exact
    indexes and `index.backend` (`setting`) would build graphs on the CPU."""
    if memory_backend(index) != "exact" or backend_for(setting, embeddings) != "hnsw":
        return ()
    return index_key_sets_read(memory)


def packaged_search(index: Path, memory: InputMemory, embeddings: Path, setting: str, scratch: Path, ef_search: int,
                    threads: int = 0, **graph_settings) -> JointSearch:
    """RAE's two indexes: the graphs `graphs_to_build` names built under `scratch`, an exact index given its keys."""
    graphs = graphs_to_build(index, memory.folder, setting, embeddings)
    if graphs:
        build_memory_indexes(embeddings, scratch, "hnsw", key_sets=graphs, threads=threads, **graph_settings)
    if not index_key_sets_read(memory.folder):
        return memory.indexes(None, ef_search, threads)
    keys = memory_keys(embeddings) if memory_backend(index) == "exact" else None  # exact keeps no keys
    baselines = load_joint_search(index, keys, ef_search, threads, **{key_set: scratch / key_set for key_set in graphs})
    return memory.indexes(baselines, ef_search, threads)


def package_model(out: Path, dataset: Dataset, encoder: Any, index: Path, memory: Path, embeddings: Path,
                  settings: RaeSettings, *, relevance: str, input_fields: str, backend: str, ef_search: int,
                  about: dict[str, Any], threads: int = 0, **graph_settings) -> None:
    """Save to `out` the model of `encoder` (None: query embeddings only), the memory stage's memory with its
    values and prior, searched by `packaged_search`, RAE at `settings`."""
    rae_memory = InputMemory(memory)
    values = rae_memory.values(training_values(dataset.label_matrix("train"), relevance, copy=False))
    with scratch_dir(out) as scratch:  # named as the output's temporaries: the next stage sweeps a killed one's
        search = packaged_search(index, rae_memory, embeddings, backend, scratch / "graphs", ef_search, threads,
                                 **graph_settings)
        write_label_records(scratch, dataset.texts("labels"))
        RaeModel(values, settings, rae_memory.log_counts(), search, encoder, LabelRecords.open(scratch),
                 input_fields, {**about, "memory": rae_memory.summary()}).save(out)
