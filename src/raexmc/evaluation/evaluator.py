"""Evaluate RAE-XMC and its baselines from one set of searches: the configured method, the dual
encoder, kNN, RAE with a λ per query, and RAE's λ and b sweeps.

Each method scores its own search: RAE the top-b_max over the joint keys, the dual encoder the top-b
over the label keys alone, kNN the top-b over the training-input keys alone. One joint retrieval
serves every λ and every b <= b_max, because the scores of a smaller b use a prefix of the same
ranked keys. The three come from two searches: RAE's keys are taken from the inputs' and the labels'
top-b_max as `infer.retrieval` says (memory.merge.RaeRetrieval: their merge, the joint top-b, or a split
share of each; a split retrieval's smaller b are not prefixes, and come with their own keys).

The test queries go through search, scoring, ranking and metrics a chunk at a time (`evaluate_retrieval`):
what grows with their number is only each method's per-query metric values.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import InitVar, dataclass, field
from functools import partial
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..data.stats import label_frequency
from ..memory.search import Hits
from ..rae.model import QueryLambdaModel, RaeModel, RaeSettings
from ..rae.pairs import remove_pairs
from ..rae.ranking import top_k
from ..rae.scoring import dual_encoder_scores, knn_scores, ova_knn_scores, train_key_counts
from .metrics import per_instance_metrics, propensity_ideals
from .propensity import DEFAULT_AB, propensities
from .score_file import TopScores
from .totals import F1_K, QueryChunk, RankingTotals

RANK_DEPTH = 100  # deep enough for R@100
QUERY_CHUNK = 8192  # queries scored at once: bounds the sparse score matrices' memory
# Bytes a chunk of test queries may take while it is scored and ranked, shared by the workers that rank it
# side by side: about SCORE_ENTRY_BYTES for each of the b_max x (1 + labels per training input) label scores
# a query's retrieval can give (sparse scores, their mix and the ranking's scratch), per worker.
CHUNK_BYTES = 256 << 20
SCORE_ENTRY_BYTES = 48
QUERY_LAMBDA_METHOD = "rae_query_lambda"  # its name beside rae, dual_encoder and knn in metrics.json, per_instance.npz

Scorer = Callable[[slice], sp.csr_matrix]  # label scores of a chunk of queries


@dataclass
class Retrievals:
    """Every query's top keys from the three searches: RAE's keys (joint ids: memory.merge.RaeRetrieval),
    label keys alone (dual encoder) and training-input keys alone (kNN); each holds ids within its own key
    set. RAE at a smaller b scores the first b of `joint`, unless `other_b` holds its own keys for that b
    (a split retrieval takes each b's share of each key set)."""

    joint: Hits
    labels: Hits
    inputs: Hits
    other_b: dict[int, Hits] = field(default_factory=dict)

    def rows(self, rows: slice) -> Retrievals:
        """These retrievals of some queries only."""
        return Retrievals(*((ids[rows], sims[rows]) for ids, sims in (self.joint, self.labels, self.inputs)),
                          other_b={b: (ids[rows], sims[rows]) for b, (ids, sims) in self.other_b.items()})

    def rae_at(self, b: int) -> Hits:
        """RAE's keys at b (the first b valid of them are scored)."""
        return self.other_b.get(b, self.joint)


def concatenated(pieces: list[Retrievals]) -> Retrievals:
    """The retrievals of consecutive groups of queries as one."""
    def stacked(hits: list[Hits]) -> Hits:
        return tuple(np.concatenate(arrays) for arrays in zip(*hits))

    return Retrievals(*(stacked([getattr(piece, name) for piece in pieces]) for name in ("joint", "labels", "inputs")),
                      other_b={b: stacked([piece.other_b[b] for piece in pieces]) for b in pieces[0].other_b})


Search = Callable[[slice], Retrievals]  # the retrievals of a chunk of the test queries


class BlockSearch:
    """A Search for consecutive chunks of queries whose answers come from searches of whole aligned blocks of
    `block` queries (rows [i * block, (i + 1) * block)), one block kept at a time.

    A search's answer for a query can depend on the other queries of its call (an exact block's BLAS rounding,
    hnswlib's retries per batch: `JointSearch.query_block`), so chunks of any size get the answers that one
    search over every query gives.
    """

    def __init__(self, search: Search, block: int, num_queries: int):
        self.search, self.block, self.num_queries = search, block, num_queries
        self.start, self.found = -1, None

    def _block(self, start: int) -> Retrievals:
        if start != self.start:
            self.start, self.found = start, None  # drop the previous block before searching the next
            self.found = self.search(slice(start, min(start + self.block, self.num_queries)))
        return self.found

    def __call__(self, rows: slice) -> Retrievals:
        first = rows.start - rows.start % self.block
        pieces = [self._block(start).rows(slice(max(rows.start, start) - start, min(rows.stop - start, self.block)))
                  for start in range(first, max(rows.stop, first + 1), self.block)]
        return pieces[0] if len(pieces) == 1 else concatenated(pieces)


@dataclass
class EvalSettings:
    lam: float
    b: int
    tau: float
    lambda_sweep: list[float] = field(default_factory=list)
    b_sweep: list[int] = field(default_factory=list)
    propensity_ab: tuple[float, float] = DEFAULT_AB
    knn_tau: float | None = None   # kNN's own τ where the tune stage chose one (selection_file.knn_tau); None: `tau`


@dataclass
class Evaluator:
    """Rankings and metrics for one dataset split (test inputs against the training memory).

    `Y_train` is the values' input part (see memory.keys_values.training_values); its pattern also gives the
    label frequencies behind propensities and segments. `memory_values` are the values of RAE's input
    keys when its memory keeps other keys than the training inputs (memory.input_memory); kNN and the
    label frequencies keep `Y_train`. Of `Y_test` only its pairs that are not filtered are kept (`truth`).
    """

    Y_train: sp.csr_matrix
    Y_test: InitVar[sp.csr_matrix]
    exclude: sp.csr_matrix
    propensity_ab: tuple[float, float]
    memory_values: sp.csr_matrix | None = None

    @property
    def rae_values(self) -> sp.csr_matrix:
        """The values RAE's input keys carry."""
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
        """Top-100 labels from `scores_of(rows)`, called on chunks of queries to bound memory;
        filtered pairs are never ranked."""
        return stacked_rankings([self.rank_rows(rows, scores_of(rows)) for rows in query_chunks(num_queries)])

    def rank_rows(self, rows: slice, scores: sp.csr_matrix) -> np.ndarray:
        """Top-100 labels of the queries `rows` from their scores; filtered pairs are never ranked."""
        return top_k(scores, RANK_DEPTH, exclude=self.exclude[rows])

    def chunk(self, rows: slice) -> QueryChunk:
        truth = self.truth[rows]
        return QueryChunk(rows, truth, self.exclude[rows], propensity_ideals(truth, self.propensity))

    def totals(self, per_instance: bool = False) -> RankingTotals:
        """An empty tally of one ranking of every query."""
        return RankingTotals(self.num_queries, self.propensity, per_instance)

    def result(self, totals: RankingTotals) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        return totals.result(self.relevant, self.train_freq)

    def summary(self, ranked: np.ndarray) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Averaged metrics (percent) with macro-F1@5 per segment, and the per-instance arrays."""
        totals = self.totals(per_instance=True)
        totals.add(self.chunk(slice(0, self.num_queries)), ranked)
        return self.result(totals)

    def per_query_values(self, ranked: np.ndarray) -> dict[str, np.ndarray]:
        """Every metric's value (a fraction) for each query of a ranking of all of them."""
        return per_instance_metrics(ranked, self.truth, propensity=self.propensity)


@dataclass
class FoldedEvaluator(Evaluator):
    """The queries of several validation folds, pooled (validation_memory.pooled), ranked as one set (their filters
    stacked; `Y_train` is the first fold's, `memory_values` every fold's memory side by side) but scored fold by
    fold, each with its own evaluator (`folds`, in the pooled order): a fold's label frequencies, behind PSP's
    propensities, are those of its own memory, which never holds the fold's queries."""

    folds: tuple[Evaluator, ...] = ()

    def fold_rankings(self, ranked: np.ndarray) -> list[tuple[Evaluator, np.ndarray]]:
        """Each fold's evaluator with the rows of `ranked` that are its queries."""
        bounds = np.cumsum([0] + [fold.num_queries for fold in self.folds])
        return [(fold, ranked[start:stop]) for fold, start, stop in zip(self.folds, bounds[:-1], bounds[1:])]

    def summary(self, ranked: np.ndarray) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The averaged metrics (percent) over every fold's queries; no per-instance arrays or macro-F1."""
        parts = []
        for fold, part in self.fold_rankings(ranked):
            totals = fold.totals()
            totals.add(fold.chunk(slice(0, fold.num_queries)), part)
            parts.append(totals)
        return RankingTotals.pooled(parts).result(self.relevant, self.train_freq)

    def per_query_values(self, ranked: np.ndarray) -> dict[str, np.ndarray]:
        values = [fold.per_query_values(part) for fold, part in self.fold_rankings(ranked)]
        return {name: np.concatenate([v[name] for v in values]) for name in values[0]}


def query_chunks(num_queries: int) -> list[slice]:
    """The chunks of QUERY_CHUNK queries that scores are computed and ranked in."""
    return [slice(start, start + QUERY_CHUNK) for start in range(0, num_queries, QUERY_CHUNK)]


def stacked_rankings(chunks: list[np.ndarray]) -> np.ndarray:
    """The rankings of consecutive chunks of queries as one (queries, 100) array."""
    return np.vstack(chunks) if chunks else np.zeros((0, RANK_DEPTH), np.int64)


def rae_scorer(model: RaeModel, hits: Hits) -> Scorer:
    """The model's scores of RAE's keys `hits` (as RaeModel.keys gives them), a chunk of queries at a time."""
    ids, sims = hits
    return lambda rows: model.scores(ids[rows], sims[rows])


def method_scorers(retrievals: Retrievals, Y_train: sp.csr_matrix, lam: float, tau: float,
                   b: int, knn_tau: float | None = None) -> dict[str, Scorer]:
    """RAE at λ, and the dual encoder and kNN, each from its own search, all at b and τ (kNN at `knn_tau` where
    given). The dual encoder's ranking is the same at any τ: a softmax over its own labels rises with similarity."""
    (z_ids, z_sims), (x_ids, x_sims) = retrievals.labels, retrievals.inputs
    knn_tau = tau if knn_tau is None else knn_tau
    return {"rae": rae_scorer(RaeModel(Y_train, RaeSettings(lam, tau, b)), retrievals.rae_at(b)),
            "dual_encoder": lambda rows: dual_encoder_scores(z_ids[rows], z_sims[rows], Y_train.shape[1], tau, b),
            "knn": lambda rows: knn_scores(x_ids[rows], x_sims[rows], Y_train, knn_tau, b)}


Ranking = tuple[list[tuple[str, Any]], Callable[[], sp.csr_matrix]]  # the keys it is reported under, its scores


def chunk_rankings(found: Retrievals, Y_train: sp.csr_matrix, rae_values: sp.csr_matrix, settings: EvalSettings,
                   with_ova_knn: bool, query_lambda: QueryLambdaModel | None) -> list[Ranking]:
    """Every distinct ranking of a chunk's retrievals, as the keys it is reported under (("method", name),
    ("lambda", i) for lambda_sweep[i], ("b", i) for b_sweep[i]) and a function that computes its label scores
    when called, so that a pool can score and rank them side by side, a few score matrices at a time.

    RAE's halves at (τ, b) serve every λ; RAE at (λ, τ, b) is also the λ sweep's point at λ and the b sweep's
    at b (the same scores), so it is ranked once for all three. Its input keys carry `rae_values` (Y_train
    unless the memory keeps other keys), kNN's carry Y_train."""
    lam, tau, b = settings.lam, settings.tau, settings.b
    rae = RaeModel(rae_values, RaeSettings(lam, tau, b))
    keys = found.joint
    parts = rae.parts(*keys)
    rae_keys = [("method", "rae"), *(("lambda", i) for i, swept in enumerate(settings.lambda_sweep) if swept == lam),
                *(("b", i) for i, swept in enumerate(settings.b_sweep) if swept == b)]
    rankings: list[Ranking] = [(rae_keys, partial(rae.mix, parts, *keys))]
    for name, scorer in method_scorers(found, Y_train, lam, tau, b, settings.knn_tau).items():
        if name != "rae":
            rankings.append(([("method", name)], partial(scorer, slice(None))))
    if with_ova_knn:
        (z_ids, z_sims), (x_ids, x_sims) = found.labels, found.inputs
        rankings.append(([("method", "ova_knn")],
                         partial(ova_knn_scores, x_ids, x_sims, z_ids, z_sims, Y_train, lam, tau, b)))
    if query_lambda is not None:
        rankings.append(([("method", QUERY_LAMBDA_METHOD)], partial(rae.at(lam=query_lambda).mix, parts, *keys)))
    rankings += [([("lambda", i)], partial(rae.at(lam=swept).mix, parts, *keys))
                 for i, swept in enumerate(settings.lambda_sweep) if swept != lam]
    rankings += [([("b", i)], partial(rae.at(b=swept).scores, *found.rae_at(swept)))
                 for i, swept in enumerate(settings.b_sweep) if swept != b]
    return rankings


def chunk_queries(Y_train: sp.csr_matrix, depth: int, budget: int = CHUNK_BYTES) -> int:
    """Test queries per chunk: as many as `budget` bytes of label scores hold (see CHUNK_BYTES), at least one."""
    per_query = depth * (1 + Y_train.nnz / max(Y_train.shape[0], 1)) * SCORE_ENTRY_BYTES
    return int(max(1, min(QUERY_CHUNK, budget // per_query)))


def evaluate_retrieval(search: Search, evaluator: Evaluator, settings: EvalSettings, with_ova_knn: bool = False,
                       query_lambda: QueryLambdaModel | None = None, chunk: int | None = None,
                       progress: bool = False, workers: int = 1, keep_scores: bool = False) -> dict[str, Any]:
    """Metrics of RAE (λ, b), the dual encoder and kNN (optionally OvA+kNN, and RAE with `query_lambda`'s λ per
    query), and RAE's λ and b sweeps, from `search(rows)`'s retrievals (at least max(b, b_sweep) keys deep) of
    the test queries, `chunk` at a time (default: `chunk_queries` for `workers`), with a progress bar when
    `progress`.

    A chunk's rankings (some 15) are scored, ranked and tallied on `workers` threads: numpy and scipy release
    the GIL in their loops, so they run side by side. Each ranking's tally takes its chunks in order, so the
    numbers are the same for any number of workers.

    Returns {"methods": {name: summary}, "per_instance": {name: arrays}, "lambda_sweep": rows,
    "b_sweep": rows}; with `keep_scores` also "scores": {name: each method's top-100 scores as a score file's
    CSR matrix (score_file.py), gathered a chunk at a time}.
    """
    from tqdm import tqdm

    Y, V, n = evaluator.Y_train, evaluator.rae_values, evaluator.num_queries
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    size = chunk or chunk_queries(Y, max([settings.b, *settings.b_sweep]), CHUNK_BYTES // workers)
    totals: dict[tuple[str, Any], RankingTotals] = {}
    key_counts = np.zeros((len(settings.b_sweep), 2), dtype=np.int64)
    kept: dict[tuple[str, Any], TopScores] = {}  # each method's top-100 scores, with keep_scores

    def rank_and_tally(queries: QueryChunk, ranking: Ranking) -> None:
        keys, scores_of = ranking
        scores = scores_of()
        ranked = top_k(scores, RANK_DEPTH, exclude=queries.exclude)
        for key in keys:
            totals[key].add(queries, ranked)
            if key in kept:
                kept[key].add(ranked, scores)

    with ThreadPoolExecutor(workers) as pool, tqdm(total=n, desc="evaluate", unit="query", disable=not progress) as bar:
        for start in range(0, max(n, 1), size):  # one chunk, empty, when there is no query
            rows = slice(start, min(start + size, n))
            found, queries = search(rows), evaluator.chunk(rows)
            rankings = chunk_rankings(found, Y, V, settings, with_ova_knn, query_lambda)
            for keys, _ in rankings:
                for key in keys:
                    if key not in totals:
                        totals[key] = evaluator.totals(per_instance=key[0] == "method")
                    if keep_scores and key[0] == "method" and key not in kept:
                        kept[key] = TopScores(Y.shape[1])
            list(pool.map(partial(rank_and_tally, queries), rankings))  # waits for the chunk; raises a worker's error
            for counts, b in zip(key_counts, settings.b_sweep):
                counts += train_key_counts(found.rae_at(b)[0], V.shape[0], b)
            bar.update(rows.stop - rows.start)
    results = {key: evaluator.result(tally) for key, tally in totals.items()}
    methods = {name: results[kind, name] for kind, name in results if kind == "method"}

    def headline(key: tuple[str, int]) -> dict[str, float]:
        return {k: results[key][0][k] for k in HEADLINE if k in results[key][0]}

    return {"methods": {name: summary for name, (summary, _) in methods.items()},
            "per_instance": {name: arrays for name, (_, arrays) in methods.items()},
            "lambda_sweep": [{"lambda": lam, **headline(("lambda", i))} for i, lam in enumerate(settings.lambda_sweep)],
            "b_sweep": [{"b": b, **headline(("b", i)),
                         "train_key_share": round(100 * float(train / total), 2) if total else float("nan")}
                        for i, (b, (train, total)) in enumerate(zip(settings.b_sweep, key_counts))],
            **({"scores": {name: top.matrix() for (_, name), top in kept.items()}} if keep_scores else {})}


HEADLINE = ("P@1", "P@3", "P@5", "nDCG@5", "PSP@5", "R@10", "R@100")


def segment_rows(methods: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Macro-F1@5 per segment as plot rows: {"method", "segment", "F1"}."""
    return [{"method": method, "segment": segment, "F1": value}
            for method, summary in methods.items()
            for segment, value in summary[f"macro-F1@{F1_K}"].items() if segment != "all"]
