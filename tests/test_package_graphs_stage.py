"""On a GPU the index stage keeps exact indexes (index.backend auto) and evaluate searches there; the package
stage then builds the HNSW graphs that predict and serve search on the CPU. Here a real reproduced project's
index folder is replaced by the exact one such a run keeps, and the real package stage packages it."""

from __future__ import annotations

import os
import shutil
import sys

import numpy as np
import pytest

from raexmc.encoder.vectors import load_embeddings
from raexmc.memory.indexes import build_memory_indexes
from raexmc.memory.persistence import saved_meta
from raexmc.rae.model import RaeModel
from tests.helpers import set_params, sh

pytestmark = pytest.mark.slow


def test_package_builds_the_graphs_a_gpu_run_left_out_and_predicts_as_the_index_stage_s(reproduced_project, tmp_path):
    project = reproduced_project
    artifacts = project / "artifacts/tiny"
    queries = np.asarray(load_embeddings(artifacts / "embeddings", "test")[:20])
    reference = RaeModel.load(artifacts / "predictor").search.search(queries, 10)
    shutil.rmtree(artifacts / "index")
    build_memory_indexes(artifacts / "embeddings", artifacts / "index", "exact", progress=False)  # what a GPU run keeps
    set_params(project, **{"package.register": False, "index.backend": "hnsw"})
    sh(sys.executable, "stages/package.py", "--dataset", "data/tiny", "--model", "artifacts/tiny/model",
       "--embeddings", "artifacts/tiny/embeddings", "--index", "artifacts/tiny/index", "--tune", "artifacts/tiny/tune",
       "--memory", "artifacts/tiny/memory", "--out", "artifacts/tiny/predictor", cwd=project,
       env={**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"})
    packaged = artifacts / "predictor"
    assert [saved_meta(packaged / key_set)["backend"] for key_set in ("inputs", "labels")] == ["hnsw", "hnsw"]
    assert not list(packaged.glob("*/keys.npy")), "graphs hold their keys"
    search = RaeModel.load(packaged).search
    assert {search.inputs.backend, search.labels.backend} == {"hnsw"}
    np.testing.assert_array_equal(search.search(queries, 10)[0], reference[0])
