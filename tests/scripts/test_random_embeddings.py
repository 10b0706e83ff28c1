"""scripts/random_embeddings.py: the shapes of a download stage's stats.json, unit rows, fixed by the seed."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

from tests.helpers import REPO


def write(dataset, out, seed):
    proc = subprocess.run([sys.executable, str(REPO / "scripts/random_embeddings.py"), "--dataset", str(dataset),
                           "--out", str(out), "--dim", "8", "--seed", str(seed)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_splits_have_the_datasets_shapes_unit_rows_and_a_seed_fixes_them(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "stats.json").write_text(json.dumps({"N_train": 70_000, "L": 5, "N_test": 3}))
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        write(tmp_path / "data", tmp_path / name, seed)
    shapes = {split: np.load(tmp_path / "a" / f"{split}.npy").shape for split in ("train", "labels", "test")}
    assert shapes == {"train": (70_000, 8), "labels": (5, 8), "test": (3, 8)}
    train = np.load(tmp_path / "a" / "train.npy")
    assert train.dtype == np.float32 and np.allclose(np.linalg.norm(train, axis=1), 1.0, atol=1e-5)
    assert len(np.unique(train, axis=0)) == len(train), "every row drawn, across the 65,536-row blocks"
    assert np.array_equal(train, np.load(tmp_path / "b" / "train.npy"))
    assert not np.array_equal(train, np.load(tmp_path / "c" / "train.npy"))
