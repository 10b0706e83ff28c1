"""`ulimit -f` under the index and memory stages: hnswlib wrote its graph through an unchecked C++ stream, so a
graph cut short at the limit was renamed into place and the stage exited 0; evaluate and package refused it
later ("Index seems to be corrupted") without the cause. Now each stage ends in one line naming the graph file
and the limit, exits 2, and leaves no output folder (and no temporary)."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from raexmc.data.sources import build_dataset
from tests.helpers import REPO, run_under_file_size_limit

N_TRAIN, DIM = 20_000, 32  # a 32-d graph of 20,000 keys (M 16) takes 5.4 MB; half of them 2.7 MB
LIMIT = 2 << 20  # bytes: room for the MLflow store, not for the graph
EDITS = {"  backend: auto ": "  backend: hnsw ", "  M: 64": "  M: 16",
         "  ef_construction: 500\n": "  ef_construction: 40\n",
         "  keep: auto ": "  keep: 0.5 ", "  method: kmeans-labels ": "  method: random ",
         "  prototypes: auto ": "  prototypes: 0 "}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """Unit embeddings of the training inputs and labels, a synthetic dataset with as many inputs, and params."""
    folder = tmp_path_factory.mktemp("inputs")
    build_dataset("syn", {"source": "synthetic", "n_train": N_TRAIN, "n_test": 16, "n_labels": 64,
                          "labels_per_input": 2, "input_words": [4, 8], "label_words": [3, 4], "topic_size": 32},
                  folder / "data", "")
    rng = np.random.default_rng(0)
    (folder / "embeddings").mkdir()
    for split, count in (("train", N_TRAIN), ("labels", 64)):
        keys = rng.normal(size=(count, DIM)).astype(np.float32)
        np.save(folder / "embeddings" / f"{split}.npy", keys / np.linalg.norm(keys, axis=1, keepdims=True))
    params = (REPO / "params.yaml").read_text()
    for old, new in EDITS.items():
        assert params.count(old) == 1, old
        params = params.replace(old, new)
    (folder / "params.yaml").write_text(params)
    return folder


@pytest.mark.parametrize("stage, options, graph", [
    ("index", ["--embeddings", "embeddings"], "inputs/hnsw.bin"),
    ("memory", ["--dataset", "data", "--embeddings", "embeddings"], "inputs/hnsw.bin")])
def test_a_graph_cut_by_the_file_size_limit_ends_the_stage_in_one_line(inputs, tmp_path, stage, options, graph):
    limited = tmp_path / "limited"
    out = limited / stage
    done = run_under_file_size_limit(limited, LIMIT, [sys.executable, str(REPO / f"stages/{stage}.py"), *options,
                                                      "--out", str(out), "--params", "params.yaml"], inputs)
    assert done.proc.returncode == 2, done.proc.stderr
    assert "Traceback" not in done.proc.stderr and done.proc.stderr.count("Error: ") == 1, done.proc.stderr
    line = done.proc.stderr.strip().splitlines()[-1]
    assert line.startswith(f"StorageError: {out / graph}: {os.strerror(errno.EFBIG)} (only {LIMIT:,} of its "), line
    assert "raise the file-size limit (ulimit -f)" in line, line
    assert done.left == [], "no output folder and no temporary"
