"""RAE-XMC and its baselines (dual encoder, kNN, OvA+kNN) and RAE's λ and b sweeps, from one
set of searches; the baselines at their own depth, so that no RAE setting changes a baseline's number."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any, get_args

import numpy as np
import scipy.sparse as sp

from ..memory.search import Hits
from ..rae.model import RaeModel, RaeSettings
from ..rae.ranking import top_k_parts
from ..rae.scoring import PAPER_B, key_probabilities, knn_scores, ova_knn_scores, train_key_counts
from ..settings import HeadlineMetric
from .evaluator import (
    CHUNK_BYTES,
    F1_K,
    RANK_DEPTH,
    Evaluator,
    QueryChunk,
    Ranking,
    RankingTotals,
    Scorer,
    chunk_queries,
    rank_chunks,
    unfiltered_depth,
)
from .retrievals import Retrievals, Search
from .score_file import TopScores

KNN_B = PAPER_B  # kNN's own b, the inputs its softmax weighs: the paper's, whatever RAE's infer.b


def baseline_depth(exclude: sp.csr_matrix) -> int:
    """How deep the baselines search: kNN's KNN_B inputs, and the dual encoder's unfiltered_depth labels."""
    return max(KNN_B, unfiltered_depth(exclude))


def rae_scorer(model: RaeModel, hits: Hits) -> Scorer:
    """The model's scores of RAE's keys `hits` (as RaeModel.keys gives them), a chunk of queries at a time."""
    ids, sims = hits
    return lambda rows: model.scores(ids[rows], sims[rows])


def method_scorers(retrievals: Retrievals, Y_train: sp.csr_matrix, lam: float, tau: float,
                   b: int, knn_tau: float | None = None, knn_b: int | None = None) -> dict[str, Scorer]:
    """RAE at (λ, τ, b), the dual encoder (every label its search returned) and kNN (its first `knn_b` inputs, default
    b, at `knn_tau`, default τ), each from its own search."""
    (z_ids, z_sims), (x_ids, x_sims) = retrievals.labels, retrievals.inputs
    knn_tau, knn_b = tau if knn_tau is None else knn_tau, b if knn_b is None else knn_b
    return {"rae": rae_scorer(RaeModel(Y_train, RaeSettings(lam, tau, b)), retrievals.rae_at(b)),
            "dual_encoder": lambda rows: key_probabilities(z_sims[rows], z_ids[rows], tau, Y_train.shape[1]),
            "knn": lambda rows: knn_scores(x_ids[rows], x_sims[rows], Y_train, knn_tau, knn_b)}


def chunk_rankings(found: Retrievals, Y_train: sp.csr_matrix, rae: RaeModel, lambda_sweep: Sequence[float],
                   b_sweep: Sequence[int], knn: tuple[float | None, int | None], with_ova_knn: bool,
                   exclude: sp.csr_matrix) -> list[Ranking]:
    """Every distinct ranking of a chunk's retrievals: the keys it is reported under (("method", name), ("lambda", i),
    ("b", i)) and its label scores when called. RAE's halves at (τ, b) serve every λ (cut to what a top RANK_DEPTH
    past `exclude` can hold where several λ share them), and RAE at its own point is ranked once for the method and
    both sweeps; kNN is scored at `knn` (τ, b; None: RAE's)."""
    lam, tau, b = rae.settings.lam, rae.settings.tau, rae.settings.b
    parts = rae.parts(*found.joint)
    if any(swept != lam for swept in lambda_sweep):
        parts = top_k_parts(parts, RANK_DEPTH, exclude)
    rae_keys = [("method", "rae"), *(("lambda", i) for i, swept in enumerate(lambda_sweep) if swept == lam),
                *(("b", i) for i, swept in enumerate(b_sweep) if swept == b)]
    rankings: list[Ranking] = [(rae_keys, partial(rae.mix, parts))]
    rankings += [([("method", name)], partial(scorer, slice(None)))
                 for name, scorer in method_scorers(found, Y_train, lam, tau, b, *knn).items() if name != "rae"]
    if with_ova_knn:
        (z_ids, z_sims), (x_ids, x_sims) = found.labels, found.inputs
        rankings.append(([("method", "ova_knn")],
                         partial(ova_knn_scores, x_ids, x_sims, z_ids, z_sims, Y_train, lam, tau, b)))
    rankings += [([("lambda", i)], partial(rae.at(lam=swept).mix, parts))
                 for i, swept in enumerate(lambda_sweep) if swept != lam]
    rankings += [([("b", i)], partial(rae.at(b=swept).scores, *found.rae_at(swept)))
                 for i, swept in enumerate(b_sweep) if swept != b]
    return rankings


def evaluate_retrieval(search: Search, evaluator: Evaluator, rae: RaeModel, lambda_sweep: Sequence[float] = (),
                       b_sweep: Sequence[int] = (), knn_tau: float | None = None, knn_b: int | None = None,
                       with_ova_knn: bool = False, chunk: int | None = None, progress: bool = False, workers: int = 1,
                       keep_scores: bool = False) -> dict[str, Any]:
    """Metrics of chunk_rankings' methods and sweeps from `search(rows)`'s retrievals, `chunk` queries at a time
    (default `chunk_queries` for `workers`) on `workers` threads: {"methods": {name: summary}, "per_instance":
    {name: arrays}, "lambda_sweep": rows, "b_sweep": rows}, with `keep_scores` "scores": {name: score file}."""
    Y, V = evaluator.Y_train, rae.values
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    size = chunk or chunk_queries(Y, max([rae.settings.b, *b_sweep]), CHUNK_BYTES // workers)
    totals: dict[tuple[str, Any], RankingTotals] = {}
    key_counts = np.zeros((len(b_sweep), 2), dtype=np.int64)
    kept: dict[tuple[str, Any], TopScores] = {}  # each method's top-100 scores, with keep_scores
    queries: list[QueryChunk] = []  # the chunk's (chunks run one at a time)

    def rankings_of(rows: slice, _pool: Any) -> list[Ranking]:
        found = search(rows)
        queries[:] = [evaluator.chunk(rows)]
        rankings = chunk_rankings(found, Y, rae, lambda_sweep, b_sweep, (knn_tau, knn_b), with_ova_knn,
                                  queries[0].exclude)
        for keys, _ in rankings:
            for key in keys:
                if key not in totals:
                    totals[key] = evaluator.totals(per_instance=key[0] == "method")
                if keep_scores and key[0] == "method" and key not in kept:
                    kept[key] = TopScores(Y.shape[1])
        for counts, b in zip(key_counts, b_sweep):
            counts += train_key_counts(found.rae_at(b)[0], V.shape[0], b)
        return rankings

    def tally(_rows: slice, keys: list[tuple[str, Any]], ranked: np.ndarray, scores: sp.csr_matrix) -> None:
        for key in keys:
            totals[key].add(queries[0], ranked)
            if key in kept:
                kept[key].add(ranked, scores)

    rank_chunks(evaluator, size, rankings_of, tally, workers, progress="evaluate" if progress else None)
    results = {key: evaluator.result(tally) for key, tally in totals.items()}
    methods = {name: results[kind, name] for kind, name in results if kind == "method"}

    def headline(key: tuple[str, int]) -> dict[str, float]:
        return {k: results[key][0][k] for k in HEADLINE if k in results[key][0]}

    return {"methods": {name: summary for name, (summary, _) in methods.items()},
            "per_instance": {name: arrays for name, (_, arrays) in methods.items()},
            "lambda_sweep": [{"lambda": lam, **headline(("lambda", i))} for i, lam in enumerate(lambda_sweep)],
            "b_sweep": [{"b": b, **headline(("b", i)),
                         "train_key_share": round(100 * float(train / total), 2) if total else float("nan")}
                        for i, (b, (train, total)) in enumerate(zip(b_sweep, key_counts))],
            **({"scores": {name: top.matrix() for (_, name), top in kept.items()}} if keep_scores else {})}


HEADLINE = get_args(HeadlineMetric)  # the metrics infer.auto_metric may name


def segment_rows(methods: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Macro-F1@5 per segment as plot rows: {"method", "segment", "F1"}."""
    return [{"method": method, "segment": segment, "F1": value}
            for method, summary in methods.items()
            for segment, value in summary[f"macro-F1@{F1_K}"].items() if segment != "all"]
