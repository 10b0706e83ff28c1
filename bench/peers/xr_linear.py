"""PECOS XR-Linear (TF-IDF features, PIFA label embeddings, default settings) on one of our datasets.

    bench/peers/setup.sh
    PYTHONPATH=src bench/.venv-peers/bin/python bench/peers/xr_linear.py --name foldoc

Scored with our Evaluator by peer_eval: bench/results/xr_linear_<name>.json and .npz.
"""

from __future__ import annotations

import json
import tempfile

import typer

from peer_eval import load_split, stopwatch, tfidf_features, write_peer_result
from raexmc.pipeline.tracking.stage import user_errors


def main(name: str = "foldoc", beam_size: int = 10) -> None:
    from pecos.xmc import Indexer, LabelEmbeddingFactory
    from pecos.xmc.xlinear.model import XLinearModel

    with user_errors():
        split = load_split(name)
    with stopwatch() as train:
        X_train, X_test = tfidf_features(split.dataset)
        # labels no training input has get no feature vector; PIFA then leaves them at the origin
        label_features = LabelEmbeddingFactory.create(split.Y_train, X_train, method="pifa")
        model = XLinearModel.train(X_train, split.Y_train, C=Indexer.gen(label_features))
    with stopwatch() as predict:
        scores = model.predict(X_test, beam_size=beam_size, only_topk=split.predict_depth).tocsr()
    with tempfile.TemporaryDirectory() as folder:
        model.save(folder)
        report = write_peer_result(split, "xr_linear", "PECOS XR-Linear (TF-IDF, PIFA, default settings)", scores,
                                   train["s"], predict["s"], folder, {"beam_size": beam_size})
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    typer.run(main)
