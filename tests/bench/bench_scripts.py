"""Bench scripts are not a package: tests load them from their files, with their folder on sys.path
(as when the script runs, so that bench/peers scripts find peer_eval). Not a conftest.py: the tests'
top conftest is imported by name (`from conftest import REPO`), and a second one would shadow it."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import scipy.sparse as sp

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load_bench_module(relative: str):
    path = BENCH / relative
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def small_project(root, n_train: int = 80, n_test: int = 12, n_labels: int = 20):
    """A made-up project of random unit embeddings (d = 8) and labels, as the embed stage lays them out, with the
    repository's params.yaml: data/tiny and artifacts/tiny/embeddings."""
    rng = np.random.default_rng(0)
    data, embeddings = root / "data" / "tiny", root / "artifacts" / "tiny" / "embeddings"
    for folder in (data, embeddings, root / "bench" / "results"):
        folder.mkdir(parents=True)
    (data / "stats.json").write_text(json.dumps({"N_train": n_train, "N_test": n_test, "L": n_labels}))
    for split, n in (("train", n_train), ("test", n_test)):
        labels = (rng.random((n, n_labels)) < 0.1) | (np.arange(n_labels) == rng.integers(0, n_labels, (n, 1)))
        sp.save_npz(data / f"Y_{split}.npz", sp.csr_matrix(labels.astype(np.float64)))
        sp.save_npz(data / f"filter_{split}.npz", sp.csr_matrix((n, n_labels), dtype=bool))
    for split, n in (("train", n_train), ("labels", n_labels), ("test", n_test)):
        v = rng.normal(size=(n, 8)).astype(np.float32)
        np.save(embeddings / f"{split}.npy", v / np.linalg.norm(v, axis=1, keepdims=True))
    (embeddings / "meta.json").write_text(json.dumps({"encoder": "made-up"}))
    shutil.copyfile(BENCH.parent / "params.yaml", root / "params.yaml")
    return data, embeddings
