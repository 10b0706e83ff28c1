"""PECOS XR-Linear (TF-IDF features, PIFA label embeddings, hierarchical k-means) on one of our datasets, at the
features, beam size and cluster size that peer_eval's search chooses on held-out training inputs.

    bench/peers/setup.sh
    PYTHONPATH=src bench/.venv-peers/bin/python bench/peers/xr_linear.py --name foldoc [--grid beam_size=10,50]

Knobs: `beam_size` (prediction only) and `max_leaf_size`, the largest cluster of labels at the tree's leaves
(PECOS's defaults 10 and 100; the tree's out-degree stays at PECOS's 16). Writes bench/results/xr_linear_<name>.json
and .npz (peer_eval).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import scipy.sparse as sp

from peer_eval import Peer, cli


def xr_linear(threads: int) -> Peer:
    from pecos.xmc import Indexer, LabelEmbeddingFactory
    from pecos.xmc.xlinear.model import XLinearModel

    def fit(X: sp.csr_matrix, Y: sp.csr_matrix, knobs: dict[str, Any], folder: Path) -> XLinearModel:
        # labels no training input has get no feature vector; PIFA then leaves them at the origin
        label_features = LabelEmbeddingFactory.create(Y, X, method="pifa", threads=threads)
        clusters = Indexer.gen(label_features, max_leaf_size=knobs["max_leaf_size"], threads=threads)
        return XLinearModel.train(X, Y, C=clusters, threads=threads)

    def predict(model: XLinearModel, X: sp.csr_matrix, depth: int, knobs: dict[str, Any]) -> sp.csr_matrix:
        return model.predict(X, beam_size=knobs["beam_size"], only_topk=depth, threads=threads).tocsr()

    def save(model: XLinearModel, folder: Path) -> Path:
        model.save(str(folder))
        return folder

    return Peer("xr_linear", "PECOS XR-Linear (TF-IDF, PIFA)", fit, predict, save,
                {"beam_size": (10, 20, 50), "max_leaf_size": (100, 50, 200)}, frozenset({"beam_size"}))


if __name__ == "__main__":
    cli({"xr_linear": xr_linear})
