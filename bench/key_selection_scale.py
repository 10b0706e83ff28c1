"""Time and memory of the k-means key selection at a chosen shape (default LF-AmazonTitles-1.3M's
2,248,619 training inputs, 384-d, 22 labels per input over 1,305,265 labels, keep 0.1).

    python bench/key_selection_scale.py [--n 2248619 --dim 384 --keep 0.1]

The inputs are seeded random unit vectors (k-means runs a fixed number of iterations, so its cost does
not depend on how clustered they are); `--method kmeans-labels` adds seeded random unit keys for the
labels. Writes bench/results/key_selection_scale_<method>.json: seconds, the resident memory before
selection (the inputs, their label rows and any label keys) and the peak during it.
"""

from __future__ import annotations

import json
import os
import resource
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import typer

from random_embeddings import fill_random_unit
from raexmc.memory.key_selection import select_keys


def resident_mb() -> int:
    status = Path("/proc/self/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) // 1024


def main(n: int = 2_248_619, dim: int = 384, labels: int = 1_305_265, labels_per_input: int = 22,
         keep: float = 0.1, method: str = "kmeans", seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    inputs = np.empty((n, dim), np.float32)
    fill_random_unit(inputs, rng)
    columns = rng.integers(0, labels, n * labels_per_input).astype(np.int32)
    values = sp.csr_matrix((np.ones(len(columns)), columns, np.arange(0, len(columns) + 1, labels_per_input)),
                           shape=(n, labels))
    values.sum_duplicates()
    label_keys = None
    if method == "kmeans-labels":
        label_keys = np.empty((labels, dim), np.float32)
        fill_random_unit(label_keys, rng)
    before = resident_mb()
    started = time.perf_counter()
    selected = select_keys(inputs, values, keep, method, seed, progress=True, labels=label_keys)
    report = {"n": n, "dim": dim, "labels": labels, "keep": keep, "method": method, "keys": len(selected),
              "seconds": round(time.perf_counter() - started, 1), "cpus": os.cpu_count(),
              "resident_before_mb": before,
              "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
              "command": "python bench/key_selection_scale.py " + shlex.join(sys.argv[1:])}
    Path(f"bench/results/key_selection_scale_{method}.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    typer.run(main)
