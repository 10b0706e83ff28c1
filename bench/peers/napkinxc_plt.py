"""napkinXC's probabilistic label trees (PLT) on TF-IDF features of one of our datasets, at the features and tree
arity that peer_eval's search chooses on held-out training inputs.

    bench/peers/setup.sh
    PYTHONPATH=src bench/.venv-peers/bin/python bench/peers/napkinxc_plt.py --name foldoc [--grid arity=2,16]

napkinXC's PLT: a hierarchical balanced k-means tree (`arity` children per node, napkinXC's default 2; leaves of
at most 100 labels), logistic-loss liblinear node classifiers, exact top-k search. Writes
bench/results/napkinxc_plt_<name>.json and .npz (peer_eval).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import scipy.sparse as sp

from peer_eval import Peer, cli


def napkinxc_plt(threads: int) -> Peer:
    from napkinxc.models import PLT

    def fit(X: sp.csr_matrix, Y: sp.csr_matrix, knobs: dict[str, Any], folder: Path) -> PLT:
        model = PLT(str(folder), arity=knobs["arity"], threads=threads, seed=0)
        model.fit(X, Y)
        return model

    def predict(model: PLT, X: sp.csr_matrix, depth: int, knobs: dict[str, Any]) -> list[list[tuple[int, float]]]:
        return model.predict_proba(X, top_k=depth)

    def save(model: PLT, folder: Path) -> Path:
        return Path(model.get_params()["output"])

    return Peer("napkinxc_plt", "napkinXC PLT (TF-IDF)", fit, predict, save, {"arity": (2, 8, 32)})


if __name__ == "__main__":
    cli({"napkinxc_plt": napkinxc_plt})
