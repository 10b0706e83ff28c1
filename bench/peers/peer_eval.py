"""What every peer baseline script shares, so that the peers and RAE are measured alike and each peer runs at
the features and settings that suit it best.

A peer script declares a `Peer`: how to fit it, how to predict with it, and its own knobs with the values to
try. `run_peer` then
1. holds out `val_fraction` of the training inputs (data.held_out.split_validation: never the test set),
2. searches the grid coordinate-wise: from the first value of every axis, one axis at a time, each value
   tried with the other axes at their best so far, fitted on the remaining training inputs and scored by P@1
   on the held-out ones with the evaluate stage's Evaluator (the training filter drops their own label);
   a value is taken only when it is strictly better, so ties keep the earlier one. The curve goes to
   bench/results/<peer>_<name>.partial.json after every point, and a rerun resumes from it;
3. fits on the whole training set at the chosen point and evaluates once on the test set: `write_peer_result`
   ranks the test scores with the Evaluator (filtered pairs never ranked, top 100 for R@100) and writes
   bench/results/<peer>_<name>.json (metrics, the chosen setting, the validation curve, train time, predict
   time per 1k queries, model size on disk) and .npz (per-instance arrays keyed "<peer>/<metric>", as in the
   evaluate stage's per_instance.npz, for paired t-tests against RAE).

The features are scikit-learn's TF-IDF of an input's text as RAE reads it (`input_fields`: title, or title then
content), fitted on the inputs the peer trains on: word 1..n-grams, optionally with character 2..5-grams within
word boundaries (each block l2-normalised, then the row), sublinear tf or not, min_df and a cap on the
vocabulary (0: none) per block.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from raexmc.data.dataset import Dataset
from raexmc.data.held_out import split_validation
from raexmc.encoder.tokens import text_of
from raexmc.errors import ConfigError, DataError
from raexmc.evaluation.evaluator import Evaluator, unfiltered_depth
from raexmc.evaluation.propensity import table_propensity
from raexmc.io import atomic_file, read_json, write_json

RESULTS = Path("bench/results")
METRIC = "P@1"  # what the search maximises on the held-out training inputs
FEATURE_AXES: dict[str, tuple[Any, ...]] = {  # the first value of each is the search's start
    "input_fields": ("title+content", "title"),
    "word_ngrams": (2, 1, 3),
    "char_ngrams": (False, True),
    "sublinear_tf": (True, False),
    "min_df": (2, 1, 5),
    "max_features": (0, 50_000, 10_000),
}
CHAR_NGRAMS = (2, 5)


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


def tfidf_features(fit_texts: list[str], *others: list[str], word_ngrams: int = 2, char_ngrams: bool = False,
                   sublinear_tf: bool = True, min_df: int = 1, max_features: int = 0) -> list[sp.csr_matrix]:
    """TF-IDF fitted on `fit_texts`, applied to them and to each of `others`: rows l2-normalised, float32."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.preprocessing import normalize

    common = dict(sublinear_tf=sublinear_tf, min_df=min_df, max_features=max_features or None, dtype=np.float32)
    blocks = [TfidfVectorizer(ngram_range=(1, word_ngrams), **common)]
    if char_ngrams:
        blocks.append(TfidfVectorizer(analyzer="char_wb", ngram_range=CHAR_NGRAMS, **common))
    fitted = [[block.fit_transform(fit_texts), *(block.transform(texts) for texts in others)] for block in blocks]
    return [normalize(sp.hstack(parts, format="csr")).astype(np.float32) for parts in zip(*fitted)]


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


def csr_rows(X: sp.csr_matrix) -> Iterator[list[tuple[int, float]]]:
    """Each row of X as (feature, value) pairs, as tree peers take one input."""
    for i in range(X.shape[0]):
        start, stop = X.indptr[i], X.indptr[i + 1]
        yield list(zip(X.indices[start:stop].tolist(), X.data[start:stop].tolist()))


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
                      results: Path = RESULTS, validation: dict[str, Any] | None = None) -> dict[str, Any]:
    """Rank a peer's test scores with our Evaluator; write <peer>_<name>.json and .npz; return the report."""
    if scores.shape != split.evaluator.truth.shape:
        raise DataError(f"{peer} scores have shape {scores.shape}, expected {split.evaluator.truth.shape}")
    ranked = split.evaluator.rank(split.num_test, lambda rows: scores[rows])
    summary, per_instance = split.evaluator.summary(ranked)
    report = {"dataset": split.name, "peer": peer, "model": model, "settings": settings,
              "train_s": round(train_s, 1), "predict_s_per_1k": round(1000 * predict_s / max(split.num_test, 1), 3),
              "model_mb": round(size_mb(model_path), 2), "metrics": summary}
    if validation is not None:
        report["validation"] = validation
    stem = results / f"{peer}_{split.name}"
    with atomic_file(stem.with_suffix(".npz"), "wb") as handle:
        np.savez_compressed(handle, **{f"{peer}/{metric}": values for metric, values in per_instance.items()})
    write_json(stem.with_suffix(".json"), report)
    return report


# ---- a peer and its search


Fit = Callable[[sp.csr_matrix, sp.csr_matrix, dict[str, Any], Path], Any]
Scores = sp.spmatrix | Iterable[Iterable[tuple[int, float]]]  # a score matrix, or each input's (label, score) pairs
Predict = Callable[[Any, sp.csr_matrix, int, dict[str, Any]], Scores]


def score_matrix(scores: Scores, num_labels: int) -> sp.csr_matrix:
    """A peer's predictions as a CSR score matrix over the `num_labels` labels."""
    return scores.tocsr() if sp.issparse(scores) else scores_from_pairs(scores, num_labels)


@dataclass(frozen=True)
class Peer:
    """A peer as the search drives it. fit(X, Y, knobs, folder) -> model (folder: scratch space that outlives the
    model, where its saved form goes); predict(model, X, depth, knobs) -> scores; knobs: its own axes (first
    value: the start); predict_knobs: those that do not change the fitted model (the search reuses it)."""

    peer: str
    model: str
    fit: Fit
    predict: Predict
    save: Callable[[Any, Path], Path]
    knobs: dict[str, tuple[Any, ...]]
    predict_knobs: frozenset[str] = field(default_factory=frozenset)


def parse_grid(overrides: list[str], axes: dict[str, tuple[Any, ...]]) -> dict[str, tuple[Any, ...]]:
    """The axes with each "name=v1,v2,..." of `overrides` replacing that axis's values (typed as its defaults;
    "name=" drops the axis and holds it at its first default)."""
    grid = dict(axes)
    for item in overrides:
        name, _, values = item.partition("=")
        if name not in axes:
            raise ConfigError(f"--grid {item!r}: no axis {name!r} (axes: {', '.join(axes)})")
        kind = type(axes[name][0])
        try:
            parsed = tuple(value.lower() in ("1", "true", "on", "yes") if kind is bool else kind(value)
                           for value in values.split(",") if value)
        except ValueError:
            raise ConfigError(f"--grid {item!r}: values of {name} must be {kind.__name__}s") from None
        grid[name] = parsed or axes[name][:1]
    return grid


def point_key(point: dict[str, Any], names: Iterable[str]) -> tuple[Any, ...]:
    return tuple((name, point[name]) for name in names)


class Search:
    """One peer's coordinate-wise search on the held-out training inputs, resumable from its partial record."""

    def __init__(self, peer: Peer, split: Split, grid: dict[str, tuple[Any, ...]], val_fraction: float,
                 seed: int, folder: Path, results: Path) -> None:
        self.peer, self.split, self.grid, self.folder = peer, split, grid, folder
        self.partial = results / f"{peer.peer}_{split.name}.partial.json"
        self.setup = {"metric": METRIC, "val_fraction": val_fraction, "seed": seed}
        done = read_json(self.partial) if self.partial.is_file() else {}
        # a point measured on the same held-out inputs counts whatever grid it was measured for
        self.curve: list[dict[str, Any]] = done.get("curve", []) if done.get("setup") == self.setup else []
        self.rest, self.val = split_validation(split.Y_train, val_fraction, seed)
        self.evaluator = Evaluator(split.Y_train[self.rest], split.Y_train[self.val],
                                   split.dataset.filter_matrix("train")[self.val],
                                   table_propensity(split.dataset.names).ab)
        self.texts = {fields: [text_of(t, fields) for t in split.dataset.texts("train")]
                      for fields in grid["input_fields"]}
        self.fit_names = [name for name in grid if name not in peer.predict_knobs]
        # the fitted peer, the held-out inputs' features and the peer's folder: the best point's and the latest
        self.fitted: dict[tuple[Any, ...], tuple[Any, sp.csr_matrix, Path]] = {}

    def model(self, point: dict[str, Any], best: dict[str, Any]) -> tuple[Any, sp.csr_matrix, Path]:
        """The peer fitted on the remaining training inputs at `point`, and the held-out inputs' features."""
        key = point_key(point, self.fit_names)
        if key not in self.fitted:
            for old in [k for k in self.fitted if k != point_key(best, self.fit_names)]:
                shutil.rmtree(self.fitted.pop(old)[2])
            texts = self.texts[point["input_fields"]]
            X_rest, X_val = tfidf_features([texts[i] for i in self.rest], [texts[i] for i in self.val],
                                           **feature_settings(point))
            folder = self.folder / f"fit{len(self.curve)}"
            folder.mkdir()
            self.fitted[key] = (self.peer.fit(X_rest, self.split.Y_train[self.rest], point, folder), X_val, folder)
        return self.fitted[key]

    def score(self, point: dict[str, Any], best: dict[str, Any]) -> float:
        """The point's validation metric (from the curve when measured before); the curve and the partial record
        gain the point."""
        for done in self.curve:
            if done["point"] == point:
                return done[METRIC]
        with stopwatch() as fit:
            model, X_val, _ = self.model(point, best)
        with stopwatch() as predict:
            scores = self.peer.predict(model, X_val, unfiltered_depth(self.evaluator.exclude), point)
            scores = score_matrix(scores, self.split.Y_train.shape[1])
        summary, _ = self.evaluator.summary(self.evaluator.rank(self.evaluator.num_queries, lambda rows: scores[rows]))
        self.curve.append({"point": point, **{m: summary[m] for m in ("P@1", "P@5", "R@100")},
                           "fit_s": round(fit["s"], 1), "predict_s": round(predict["s"], 1)})
        write_json(self.partial, {"setup": self.setup, "curve": self.curve})
        print(f"{self.peer.peer} {self.split.name}: validation {METRIC} {summary[METRIC]:.2f} at {point}", flush=True)
        return summary[METRIC]

    def run(self) -> dict[str, Any]:
        return coordinate_search(self.grid, self.score)


def coordinate_search(grid: dict[str, tuple[Any, ...]], score: Callable[[dict[str, Any], dict[str, Any]], float]
                      ) -> dict[str, Any]:
    """The chosen point: from every axis's first value, one pass over the axes in order, each value tried
    (score(trial, best so far)) at the best of the others and taken only when strictly better."""
    best = {name: values[0] for name, values in grid.items()}
    best_value = score(best, best)
    for name, values in grid.items():
        for value in values:
            trial = {**best, name: value}
            measured = score(trial, best)
            if measured > best_value:
                best, best_value = trial, measured
    return best


def feature_settings(point: dict[str, Any]) -> dict[str, Any]:
    """tfidf_features' keywords at a point of the grid."""
    return {name: point[name] for name in FEATURE_AXES if name != "input_fields"}


def chosen_features(peer: str, name: str, results: Path = RESULTS) -> list[str]:
    """--grid items that hold every feature axis at what another peer's record chose on the same dataset."""
    chosen = read_json(results / f"{peer}_{name}.json")["settings"]
    return [f"{axis}={chosen[axis]}" for axis in FEATURE_AXES]


def run_peer(peer: Peer, name: str, grid: list[str], val_fraction: float = 0.2, seed: int = 0,
             results: Path = RESULTS, features_from: str | None = None) -> dict[str, Any]:
    """Search `peer`'s grid on `name`'s held-out training inputs (the features held at `features_from`'s choice
    where given), then fit on all of them and write the test record (see the module's docstring); the report."""
    held = chosen_features(features_from, name, results) if features_from else []
    axes = parse_grid([*held, *grid], {**FEATURE_AXES, **peer.knobs})
    split = load_split(name)
    with tempfile.TemporaryDirectory() as scratch:
        search = Search(peer, split, axes, val_fraction, seed, Path(scratch), results)
        chosen = search.run()
        search.fitted.clear()
        fields = chosen["input_fields"]
        with stopwatch() as train:
            X_train, X_test = tfidf_features(search.texts[fields], [text_of(t, fields)
                                                                    for t in split.dataset.texts("test")],
                                             **feature_settings(chosen))
            (Path(scratch) / "final").mkdir()
            model = peer.fit(X_train, split.Y_train, chosen, Path(scratch) / "final")
        with stopwatch() as predict:
            scores = score_matrix(peer.predict(model, X_test, split.predict_depth, chosen), split.Y_train.shape[1])
        validation = {**search.setup, "grid": {name: list(values) for name, values in axes.items()},
                      "features_from": features_from, "chosen": chosen, "curve": search.curve}
        report = write_peer_result(split, peer.peer, peer.model, scores, train["s"], predict["s"],
                                   peer.save(model, Path(scratch) / "saved"), chosen, results, validation)
    search.partial.unlink(missing_ok=True)
    return report


def cli(variants: dict[str, Callable[[int], Peer]]) -> None:
    """Run a peer script: `--name` the dataset, `--variant` one of `variants` (the first by default), `--grid
    axis=v1,v2` (repeated) to change an axis's values, `--threads` the peer's own threads (1: the machine is
    shared)."""
    import json

    import typer

    from raexmc.pipeline.tracking.stage import user_errors

    def main(name: str = "foldoc", variant: str = next(iter(variants)),
             grid: list[str] = typer.Option([], help="axis=v1,v2,...: the axis's values, the first the start"),
             features_from: str = typer.Option(None, help="a peer (xr_linear) whose record's features to hold"),
             threads: int = 1, val_fraction: float = 0.2, seed: int = 0) -> None:
        if variant not in variants:
            raise typer.BadParameter(f"--variant must be one of {', '.join(variants)}")
        with user_errors():
            report = run_peer(variants[variant](threads), name, grid, val_fraction, seed, features_from=features_from)
        print(json.dumps({k: v for k, v in report.items() if k != "validation"}, indent=2))

    typer.run(main)
