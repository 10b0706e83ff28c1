"""napkinXC's probabilistic label trees (PLT) on TF-IDF features of one of our datasets.

    bench/peers/setup.sh
    PYTHONPATH=src bench/.venv-peers/bin/python bench/peers/napkinxc_plt.py --name foldoc

napkinXC's default PLT: a hierarchical balanced 2-means tree with leaves of at most 100 labels,
logistic-loss liblinear node classifiers, exact top-k search. Scored with our Evaluator by peer_eval:
bench/results/napkinxc_plt_<name>.json and .npz.
"""

from __future__ import annotations

import json
import tempfile

import typer

from peer_eval import load_split, scores_from_pairs, stopwatch, tfidf_features, write_peer_result
from raexmc.pipeline.tracking.stage import user_errors


def main(name: str = "foldoc", threads: int = 2, seed: int = 0) -> None:
    from napkinxc.models import PLT

    with user_errors():
        split = load_split(name)
    with tempfile.TemporaryDirectory() as folder:
        with stopwatch() as train:
            X_train, X_test = tfidf_features(split.dataset)
            model = PLT(folder, threads=threads, seed=seed)
            model.fit(X_train, split.Y_train)
        with stopwatch() as predict:
            scores = scores_from_pairs(model.predict_proba(X_test, top_k=split.predict_depth), split.Y_train.shape[1])
        report = write_peer_result(split, "napkinxc_plt", "napkinXC PLT (TF-IDF, default settings)", scores,
                                   train["s"], predict["s"], folder, {"threads": threads, "seed": seed})
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    typer.run(main)
