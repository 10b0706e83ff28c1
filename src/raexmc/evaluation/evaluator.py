"""Rankings and metrics of one evaluation set (test inputs against the training memory), a chunk of queries at
a time: what grows with the number of queries is only each ranking's per-query metric values. The metrics come out
the same however the queries are chunked: a mean is a running sum in query order over the count, PSP@k and
PSnDCG@k the ratio of two such means, macro-F1 from per-label counts."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import InitVar, dataclass
from functools import cached_property, partial
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..data.stats import label_frequency
from ..rae.pairs import remove_pairs
from ..rae.ranking import top_k
from .metrics import (
    f1_counts,
    macro_f1_from_counts,
    over_mean_ideal,
    per_query_values,
    percent,
    propensity_ideals,
)
from .propensity import propensities

RANK_DEPTH = 100  # deep enough for R@100
F1_K = 5
QUERY_CHUNK = 8192  # queries scored at once: bounds the sparse score matrices' memory
# Bytes a chunk of test queries may take while it is scored and ranked, shared by the workers that rank it
# side by side: about SCORE_ENTRY_BYTES for each of the b_max x (1 + labels per training input) label scores
# a query's retrieval can give (sparse scores, their mix and the ranking's scratch), per worker.
CHUNK_BYTES = 256 << 20
SCORE_ENTRY_BYTES = 48

Scorer = Callable[[slice], sp.csr_matrix]  # label scores of a chunk of queries
Ranking = tuple[Any, Callable[[], sp.csr_matrix]]  # what a ranking is reported under, and its scores when called


def unfiltered_depth(exclude: sp.csr_matrix) -> int:
    """Labels a ranking must hold for RANK_DEPTH to remain in every row once `exclude`'s pairs are dropped."""
    return RANK_DEPTH + int(np.diff(sp.csr_matrix(exclude).indptr).max(initial=0))


# Every query's metric values are kept in float32: they lie in [0, 1] (PSP's over a mean ideal, near it), so 7
# significant digits serve the paired t-tests, and at 970K test queries x 4 methods x 14 metrics float64 would
# hold 0.43 GB. The means are summed from each chunk's float64 values, never from these.
PER_QUERY_DTYPE = np.float32


@dataclass
class QueryChunk:
    """Some consecutive test queries: their rows, truth (without filtered pairs), filtered pairs, and their ideal
    rankings' PSP@k and PSnDCG@k denominators."""

    rows: slice
    truth: sp.csr_matrix
    exclude: sp.csr_matrix
    ideals: dict[str, np.ndarray]


def running_sum(total: float, values: np.ndarray) -> float:
    """total + values[0] + values[1] + ..., in order: any split into consecutive chunks gives the same float."""
    return float(np.add.accumulate(np.concatenate(([total], values)))[-1])


class RankingTotals:
    """Sums of one ranking's per-query metrics over the chunks added so far; with `per_instance`, also every
    query's values and the macro-F1@5 counts."""

    def __init__(self, num_queries: int, propensity: np.ndarray, per_instance: bool = False):
        self.num_queries, self.propensity = num_queries, propensity
        self.count, self.sums, self.ideal_sums = 0, {}, {}
        self.values: dict[str, np.ndarray] | None = {} if per_instance else None
        self.tp = self.predicted = None

    def add(self, chunk: QueryChunk, ranked: np.ndarray) -> None:
        values = per_query_values(ranked, chunk.truth, propensity=self.propensity)
        for sums, new in ((self.sums, values), (self.ideal_sums, chunk.ideals)):
            for name, array in new.items():
                sums[name] = running_sum(sums.get(name, 0.0), array)
        self.count += len(ranked)
        if self.values is None:
            return
        for name, array in values.items():
            self.values.setdefault(name, np.empty(self.num_queries, PER_QUERY_DTYPE))[chunk.rows] = array
        tp, predicted = f1_counts(ranked, chunk.truth, F1_K)
        self.tp, self.predicted = (tp, predicted) if self.tp is None else (self.tp + tp, self.predicted + predicted)

    @classmethod
    def pooled(cls, parts: list[RankingTotals]) -> RankingTotals:
        """The sums of several sets of queries, each scored with its own propensities, as of one set (no per-query
        values or macro-F1 counts)."""
        pooled = cls(sum(part.num_queries for part in parts), np.empty(0))
        pooled.count = sum(part.count for part in parts)
        for name in ("sums", "ideal_sums"):
            setattr(pooled, name, {key: sum(getattr(part, name)[key] for part in parts)
                                   for key in getattr(parts[0], name)})
        return pooled

    def result(self, relevant: np.ndarray, train_freq: np.ndarray) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The summary (percent; macro-F1@5 per segment from each label's positives `relevant`) and the per-query
        arrays (empty without `per_instance`), once every query was added."""
        if self.count != self.num_queries:
            raise ValueError(f"{self.count} of {self.num_queries} queries were added")
        n = max(self.count, 1)
        means = {name: total / n for name, total in self.sums.items()}
        per_instance = self.values or {}
        for name, ideal_total in self.ideal_sums.items():
            mean_ideal = ideal_total / n
            means[name] = means[name] / mean_ideal if mean_ideal > 0 else 0.0
            if name in per_instance:
                per_instance[name] = over_mean_ideal(per_instance[name], mean_ideal)
        summary: dict[str, Any] = {name: percent(mean) if self.count else float("nan") for name, mean in means.items()}
        if self.tp is not None:
            f1 = macro_f1_from_counts(self.tp, self.predicted, relevant, train_freq)
            summary[f"macro-F1@{F1_K}"] = {k: (round(100 * v, 2) if np.isfinite(v) else None) for k, v in f1.items()}
        return summary, per_instance


@dataclass
class Evaluator:
    """Rankings and metrics for one dataset split. `Y_train`'s pattern gives the label frequencies behind
    propensities and segments; `memory_values` RAE's input keys' values where the memory keeps other keys."""

    Y_train: sp.csr_matrix
    Y_test: InitVar[sp.csr_matrix]
    exclude: sp.csr_matrix
    propensity_ab: tuple[float, float]
    memory_values: sp.csr_matrix | None = None

    @property
    def rae_values(self) -> sp.csr_matrix:
        return self.Y_train if self.memory_values is None else self.memory_values

    def __post_init__(self, Y_test: sp.csr_matrix) -> None:
        self.truth = remove_pairs(Y_test, self.exclude)
        self.train_freq = label_frequency(self.Y_train)
        A, B = self.propensity_ab
        self.propensity = propensities(self.train_freq, self.Y_train.shape[0], A, B)
        self.relevant = np.bincount(self.truth.indices, minlength=self.truth.shape[1])  # positives per label

    @property
    def num_queries(self) -> int:
        return self.truth.shape[0]

    def rank(self, num_queries: int, scores_of: Scorer) -> np.ndarray:
        """Top-100 labels from `scores_of(rows)`, QUERY_CHUNK queries at a time; filtered pairs never ranked."""
        chunks = [slice(start, start + QUERY_CHUNK) for start in range(0, num_queries, QUERY_CHUNK)]
        return stacked_rankings([self.rank_rows(rows, scores_of(rows)) for rows in chunks])

    def rank_rows(self, rows: slice, scores: sp.csr_matrix) -> np.ndarray:
        return top_k(scores, RANK_DEPTH, exclude=self.exclude[rows])

    def chunk(self, rows: slice) -> QueryChunk:
        truth = self.truth[rows]
        return QueryChunk(rows, truth, self.exclude[rows], propensity_ideals(truth, self.propensity))

    @cached_property
    def every_query(self) -> QueryChunk:
        """All queries as one chunk, built once: the tune stage scores hundreds of rankings of the same queries."""
        return self.chunk(slice(0, self.num_queries))

    def totals(self, per_instance: bool = False, ranked: np.ndarray | None = None) -> RankingTotals:
        """A tally of one ranking of every query: empty, or holding `ranked`."""
        totals = RankingTotals(self.num_queries, self.propensity, per_instance)
        if ranked is not None:
            totals.add(self.every_query, ranked)
        return totals

    def result(self, totals: RankingTotals) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return totals.result(self.relevant, self.train_freq)

    def summary(self, ranked: np.ndarray) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return self.result(self.totals(True, ranked))


@dataclass
class FoldedEvaluator(Evaluator):
    """Several validation folds' queries ranked as one set but scored fold by fold (`folds`, in pooled order)."""

    folds: tuple[Evaluator, ...] = ()

    def summary(self, ranked: np.ndarray) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        bounds = np.cumsum([0] + [fold.num_queries for fold in self.folds])
        parts = [fold.totals(ranked=ranked[start:stop]) for fold, start, stop in zip(self.folds, bounds, bounds[1:])]
        return RankingTotals.pooled(parts).result(self.relevant, self.train_freq)


def stacked_rankings(chunks: list[np.ndarray]) -> np.ndarray:
    return np.vstack(chunks) if chunks else np.zeros((0, RANK_DEPTH), np.int64)


def chunk_queries(Y_train: sp.csr_matrix, depth: int, budget: int = CHUNK_BYTES) -> int:
    """Test queries per chunk: as many as `budget` bytes of label scores hold, at least one."""
    per_query = depth * (1 + Y_train.nnz / max(Y_train.shape[0], 1)) * SCORE_ENTRY_BYTES
    return int(max(1, min(QUERY_CHUNK, budget // per_query)))


def rank_chunks(evaluator: Evaluator, size: int | None,
                rankings_of: Callable[[slice, ThreadPoolExecutor], list[Ranking]],
                consume: Callable[[slice, Any, np.ndarray, sp.csr_matrix], None], workers: int = 1,
                progress: str | None = None) -> None:
    """The one sweep-and-rank loop (tune's curve, evaluate's methods and sweeps): `size` (default QUERY_CHUNK)
    queries at a time, a chunk's `rankings_of(rows, pool)` scored, ranked and handed to `consume(rows, key, ranked,
    scores)` on `workers` threads; a chunk ends before the next begins, so numbers do not depend on the thread count."""
    from ..progress import progress_bar

    def rank(rows: slice, ranking: Ranking) -> None:
        key, scores_of = ranking
        scores = scores_of()
        consume(rows, key, evaluator.rank_rows(rows, scores), scores)

    n, size = evaluator.num_queries, size or QUERY_CHUNK
    with ThreadPoolExecutor(workers) as pool, \
            progress_bar(total=n, desc=progress, unit="query", disable=progress is None) as bar:
        for start in range(0, max(n, 1), size):  # one chunk, empty, when there is no query
            rows = slice(start, min(start + size, n))
            list(pool.map(partial(rank, rows), rankings_of(rows, pool)))  # waits for the chunk; raises a worker's error
            bar.update(rows.stop - rows.start)
