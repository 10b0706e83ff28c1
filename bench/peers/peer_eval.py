"""What every peer baseline script shares, so that the peers and RAE are measured alike.

A peer reads one of our dataset folders (same train/test split), gets TF-IDF features of its texts
(`tfidf_features`: PECOS's TF-IDF preprocessor fitted on the training texts, one feature recipe for
every peer), predicts label scores for the test inputs, and hands them to `write_peer_result`, which
ranks them with the evaluate stage's Evaluator (filtered pairs never ranked, top 100 for R@100) and
writes bench/results/<peer>_<name>.json (metrics, train time, predict time per 1k queries, model size
on disk) and bench/results/<peer>_<name>.npz (per-instance arrays keyed "<peer>/<metric>", as in the
evaluate stage's per_instance.npz, for paired t-tests against RAE).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from raexmc.data.dataset import Dataset
from raexmc.errors import DataError
from raexmc.evaluation.evaluator import Evaluator, unfiltered_depth
from raexmc.evaluation.propensity import table_propensity
from raexmc.io import atomic_file, write_json

RESULTS = Path("bench/results")


@dataclass
class Split:
    """A dataset's label matrices and test filter, and the evaluator the evaluate stage would build."""

    name: str
    dataset: Dataset
    Y_train: sp.csr_matrix
    evaluator: Evaluator

    @property
    def num_test(self) -> int:
        return self.evaluator.num_queries

    @property
    def predict_depth(self) -> int:
        """How many labels a peer must return per test input so that RANK_DEPTH remain after the filter."""
        return unfiltered_depth(self.evaluator.exclude)


def load_split(name: str, folder: str | Path | None = None) -> Split:
    dataset = Dataset(folder or Path("data") / name)
    Y_train = dataset.label_matrix("train").astype(np.float32)
    evaluator = Evaluator(Y_train, dataset.label_matrix("test"), dataset.filter_matrix("test"),
                          table_propensity(dataset.names).ab)
    return Split(name, dataset, Y_train, evaluator)


def input_texts(dataset: Dataset, split: str) -> list[str]:
    """An input's text as the tokenize stage's default input_fields make it: title, then content."""
    return [f"{text.title} {text.content}".strip() for text in dataset.texts(split)]


def tfidf_features(dataset: Dataset) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """(X_train, X_test): PECOS's default TF-IDF, fitted on the training texts (row-normalised, float32)."""
    from pecos.utils.featurization.text.preprocess import Preprocessor

    train = input_texts(dataset, "train")
    preprocessor = Preprocessor.train(train, {"type": "tfidf", "kwargs": {}})
    return (preprocessor.predict(train).tocsr().astype(np.float32),
            preprocessor.predict(input_texts(dataset, "test")).tocsr().astype(np.float32))


def scores_from_pairs(rows: Iterable[Iterable[tuple[int, float]]], num_labels: int) -> sp.csr_matrix:
    """A CSR score matrix from each input's (label, score) predictions, as tree peers return them."""
    indptr, indices, data = [0], [], []
    for row in rows:
        for label, score in row:
            indices.append(label)
            data.append(score)
        indptr.append(len(indices))
    indices = np.asarray(indices, dtype=np.int64)
    if indices.size and (indices.min() < 0 or indices.max() >= num_labels):
        raise DataError(f"a peer predicted a label outside [0, {num_labels})")
    return sp.csr_matrix((np.asarray(data, dtype=np.float32), indices, np.asarray(indptr, dtype=np.int64)),
                         shape=(len(indptr) - 1, num_labels))


@contextmanager
def stopwatch() -> Iterator[dict[str, float]]:
    """`with stopwatch() as t: ...` leaves the elapsed seconds in t["s"]."""
    timing = {"s": 0.0}
    started = time.perf_counter()
    try:
        yield timing
    finally:
        timing["s"] = time.perf_counter() - started


def size_mb(path: str | Path) -> float:
    """Bytes on disk of a file or of every file under a folder, in MB (10^6 bytes)."""
    path = Path(path)
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files) / 1e6


def write_peer_result(split: Split, peer: str, model: str, scores: sp.csr_matrix, train_s: float,
                      predict_s: float, model_path: str | Path, settings: dict[str, Any],
                      results: Path = RESULTS) -> dict[str, Any]:
    """Rank a peer's test scores with our Evaluator; write <peer>_<name>.json and .npz; return the report."""
    if scores.shape != split.evaluator.truth.shape:
        raise DataError(f"{peer} scores have shape {scores.shape}, expected {split.evaluator.truth.shape}")
    ranked = split.evaluator.rank(split.num_test, lambda rows: scores[rows])
    summary, per_instance = split.evaluator.summary(ranked)
    report = {"dataset": split.name, "peer": peer, "model": model, "settings": settings,
              "train_s": round(train_s, 1), "predict_s_per_1k": round(1000 * predict_s / max(split.num_test, 1), 3),
              "model_mb": round(size_mb(model_path), 2), "metrics": summary}
    stem = results / f"{peer}_{split.name}"
    with atomic_file(stem.with_suffix(".npz"), "wb") as handle:
        np.savez_compressed(handle, **{f"{peer}/{metric}": values for metric, values in per_instance.items()})
    write_json(stem.with_suffix(".json"), report)
    return report
