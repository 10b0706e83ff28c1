"""omikuji's partitioned label trees on TF-IDF features of one of our datasets, as Bonsai or as Parabel, at the
features, tree width and cluster balance that peer_eval's search chooses on held-out training inputs.

    bench/peers/setup.sh
    PYTHONPATH=src bench/.venv-peers/bin/python bench/peers/omikuji_trees.py --name foldoc --variant bonsai

The two variants start from the omikuji README's: Bonsai = unbalanced k-means with k=100 and trees of depth at
most 3; Parabel = balanced 2-means and deep trees (omikuji's defaults: max depth 20, 3 trees, leaves of at most
100 labels). Knobs: `cluster_k` (the tree's width), `cluster_balanced`, and `beam_size` (prediction only).
Writes bench/results/omikuji_<variant>_<name>.json and .npz (peer_eval).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from peer_eval import Peer, cli, csr_rows

VARIANTS = {  # variant: (fixed settings, knobs)
    "bonsai": ({"max_depth": 3}, {"cluster_k": (100, 50, 200), "cluster_balanced": (False, True)}),
    "parabel": ({"max_depth": 20}, {"cluster_k": (2, 4, 8), "cluster_balanced": (True, False)}),
}


def write_xc_file(path: Path, X: sp.csr_matrix, Y: sp.csr_matrix) -> None:
    """The XC Repository's text format that omikuji trains from: a "N F L" header, then per input
    "l1,l2 f:v f:v" (labels, then its nonzero features). omikuji cannot read an input without features (a
    vocabulary cut by min_df can leave one), which carries no evidence for its classifiers: it is left out."""
    kept = np.flatnonzero(np.diff(X.indptr))
    with open(path, "w", encoding="ascii") as handle:
        handle.write(f"{len(kept)} {X.shape[1]} {Y.shape[1]}\n")
        for i, row in zip(kept, csr_rows(X[kept])):
            labels = ",".join(map(str, Y.indices[Y.indptr[i]:Y.indptr[i + 1]]))
            handle.write(f"{labels} {' '.join(f'{f}:{v:.6g}' for f, v in row)}\n")


def omikuji_trees(variant: str, threads: int) -> Peer:
    import omikuji

    fixed, knobs = VARIANTS[variant]

    def fit(X: sp.csr_matrix, Y: sp.csr_matrix, point: dict[str, Any], folder: Path) -> omikuji.Model:
        write_xc_file(folder / "train.txt", X, Y)
        hyper = omikuji.Model.default_hyper_param()
        for key, value in {**fixed, **{k: point[k] for k in knobs}}.items():
            setattr(hyper, key, value)
        model = omikuji.Model.train_on_data(str(folder / "train.txt"), hyper, n_threads=threads)
        model.init_prediction_thread_pool(threads)
        return model

    def predict(model: omikuji.Model, X: sp.csr_matrix, depth: int, point: dict[str, Any]):
        return (model.predict(row, beam_size=point["beam_size"], top_k=depth) for row in csr_rows(X))

    def save(model: omikuji.Model, folder: Path) -> Path:
        model.save(str(folder))
        return folder

    return Peer(f"omikuji_{variant}", f"omikuji {variant.capitalize()}-like trees (TF-IDF)", fit, predict, save,
                {**knobs, "beam_size": (10, 20)}, frozenset({"beam_size"}))


if __name__ == "__main__":
    cli({variant: partial(omikuji_trees, variant) for variant in VARIANTS})
