"""Which HNSW graphs the package stage builds for predict and serve on the CPU when the index stage kept exact
indexes for a search on a GPU."""

from __future__ import annotations

import numpy as np

from raexmc.memory.indexes import build_memory_indexes, make_index
from raexmc.memory.persistence import save_index
from raexmc.memory.search import EXACT_MAX_KEYS
from raexmc.rae.packaging import graphs_to_build


def test_package_builds_the_graphs_the_index_stage_left_to_a_gpu_s_exact_search(tmp_path):
    """Exact indexes (what the index stage keeps when it resolves auto for a GPU) at a size where the CPU's choice is
    a graph: the package stage builds the graph of each key set the predictor reads from the index stage; with
    graphs already built, or at a size the CPU searches exactly too, or with exact named, none."""
    embeddings, index, memory = tmp_path / "emb", tmp_path / "index", tmp_path / "memory"
    embeddings.mkdir()
    rng = np.random.default_rng(0)
    for split, rows in (("train", EXACT_MAX_KEYS), ("labels", 1)):
        np.save(embeddings / f"{split}.npy", rng.normal(size=(rows, 2)).astype(np.float32))
    build_memory_indexes(embeddings, index, "exact", progress=False)
    memory.mkdir()
    assert graphs_to_build(index, memory, "auto", embeddings) == ("inputs", "labels")
    assert graphs_to_build(index, memory, "exact", embeddings) == ()
    save_index(make_index("exact", np.zeros((3, 2), np.float32)), memory / "inputs")  # a smaller memory's own
    assert graphs_to_build(index, memory, "auto", embeddings) == ("labels",)
    np.save(embeddings / "train.npy", np.zeros((EXACT_MAX_KEYS - 1, 2), np.float32))
    assert graphs_to_build(index, memory, "auto", embeddings) == ()
    built = build_memory_indexes(embeddings, tmp_path / "graphs", "hnsw", key_sets=("labels",), progress=False,
                                 threads=1)
    assert list(built) == ["labels"] and [p.name for p in (tmp_path / "graphs").iterdir()] == ["labels"]
