"""omikuji's partitioned label trees on TF-IDF features of one of our datasets, as Bonsai or as Parabel.

    bench/peers/setup.sh
    PYTHONPATH=src bench/.venv-peers/bin/python bench/peers/omikuji_trees.py --name foldoc --variant bonsai

The two variants are the omikuji README's: Bonsai = unbalanced k-means with k=100 and trees of depth
at most 3; Parabel = balanced 2-means and deep trees (omikuji's defaults: max depth 20, 3 trees,
leaves of at most 100 labels). Scored with our Evaluator by peer_eval:
bench/results/omikuji_<variant>_<name>.json and .npz.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import scipy.sparse as sp
import typer

from peer_eval import load_split, scores_from_pairs, stopwatch, tfidf_features, write_peer_result
from raexmc.pipeline.tracking.stage import user_errors

VARIANTS = {
    "bonsai": {"cluster_k": 100, "cluster_balanced": False, "max_depth": 3},
    "parabel": {"cluster_k": 2, "cluster_balanced": True, "max_depth": 20},
}


def write_xc_file(path: Path, X: sp.csr_matrix, Y: sp.csr_matrix) -> None:
    """The XC Repository's text format that omikuji trains from: a "N F L" header, then per input
    "l1,l2 f:v f:v" (labels, then its nonzero features)."""
    with open(path, "w", encoding="ascii") as handle:
        handle.write(f"{X.shape[0]} {X.shape[1]} {Y.shape[1]}\n")
        for i in range(X.shape[0]):
            labels = ",".join(map(str, Y.indices[Y.indptr[i]:Y.indptr[i + 1]]))
            start, stop = X.indptr[i], X.indptr[i + 1]
            features = " ".join(f"{f}:{v:.6g}" for f, v in zip(X.indices[start:stop], X.data[start:stop]))
            handle.write(f"{labels} {features}\n")


def main(name: str = "foldoc", variant: str = "bonsai", beam_size: int = 10, threads: int = 2) -> None:
    import omikuji

    if variant not in VARIANTS:
        raise typer.BadParameter(f"variant must be one of {sorted(VARIANTS)}")
    with user_errors():
        split = load_split(name)
    with tempfile.TemporaryDirectory() as folder:
        with stopwatch() as train:
            X_train, X_test = tfidf_features(split.dataset)
            write_xc_file(Path(folder) / "train.txt", X_train, split.Y_train)
            hyper = omikuji.Model.default_hyper_param()
            for key, value in VARIANTS[variant].items():
                setattr(hyper, key, value)
            model = omikuji.Model.train_on_data(str(Path(folder) / "train.txt"), hyper, n_threads=threads)
        model.init_prediction_thread_pool(threads)
        with stopwatch() as predict:
            rows = (list(zip(X_test.indices[X_test.indptr[i]:X_test.indptr[i + 1]].tolist(),
                             X_test.data[X_test.indptr[i]:X_test.indptr[i + 1]].tolist()))
                    for i in range(X_test.shape[0]))
            scores = scores_from_pairs((model.predict(row, beam_size=beam_size, top_k=split.predict_depth)
                                        for row in rows), split.Y_train.shape[1])
        model.save(str(Path(folder) / "model"))
        settings = {**VARIANTS[variant], "n_trees": hyper.n_trees, "beam_size": beam_size, "threads": threads}
        report = write_peer_result(split, f"omikuji_{variant}", f"omikuji {variant.capitalize()}-like trees (TF-IDF)",
                                   scores, train["s"], predict["s"], Path(folder) / "model", settings)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    typer.run(main)
