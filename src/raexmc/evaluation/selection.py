"""Choosing RAE's λ and τ (and a split retrieval's label share) on held-out training inputs (`infer.lambda: auto`,
`infer.tau: auto`, `infer.label_share: auto`), never on the test set.

The right λ moves with the dataset and with training, so it is chosen on data the test never sees:
the held-out training inputs (the split training's validation uses) query a memory built like the
evaluation's from the training inputs that remain, keys [X_rest; Z] and values [λ·Y_rest; (1−λ)·I].
The held-out inputs are not keys of that memory, so none can find itself (which would make kNN look
perfect). A smaller memory (`memory.keep` < 1) is selected from the remaining inputs by the memory
stage's method, so that λ and τ are chosen for the memory that evaluate and predict search. One
exact top-b search of the input keys and one of the labels serve the whole grid: RAE's keys are taken from
them as `infer.retrieval` says (memory.merge.RaeRetrieval), one softmax per (τ, label share)
(`RaeModel.parts`), one sparse mix per λ (`RaeModel.mix`), each ranked and scored by the Evaluator as the test set
is. The best (λ, τ) by `infer.auto_metric` wins; among equal values (metrics are rounded to 0.01 points)
the joint retrieval, then the one nearest the paper's λ = 0.5, τ = 0.04 (τ by ratio), then the label share nearest
0.5, wins. With `infer.retrieval: auto` the curve holds both retrievals, joint and split, scored from the same two
searches: choosing between them costs rankings, not searches.

A choice cannot fall off its grid: where the best value of a chosen λ, τ or label share sits on an edge of its
grid, the grid gains a point past that edge (τ doubled or halved; λ and the share by the edge's gap, within
[0, 1]) and the choice is made again, at most WIDEN_STEPS points past each edge; the curve keeps every point
tried. A split retrieval with an automatic share is chosen in two rounds, so that the grid's cost adds up
rather than multiplies: λ × τ at the fixed share (0.5 when auto), then λ × share at the τ chosen.

At most `infer.val_max_queries` of the held-out inputs query (a seeded subset): the search costs
queries x (memory inputs + labels) products, which at 5% of N held out would grow with N squared; a
fixed number of queries makes it grow with N. The held-out inputs beyond the cap stay out of the
memory all the same: the memory is the one every cap queries, so the cap only changes how many
queries measure it (the estimate's noise), not what is measured.

A small set holds out few inputs (FOLDOC: 411), and on so few the choice follows a query or two. So the
validation may hold out several disjoint folds in turn (`infer.val_folds`; auto: as many as take the held-out
inputs to VAL_MIN_QUERIES, one where a fold has that many), each querying a memory of all the other inputs, and
the curve is measured on all their queries at once (`pooled`): the same memory size, K times the queries, each
fold's queries scored with its own memory's label frequencies (FoldedEvaluator). Not with a fine-tuned encoder:
training held out only the first fold (the split training validates on), and trained on the others.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import numpy as np

from ..memory.merge import DEFAULT_LABEL_SHARE, JOINT, SPLIT, RaeRetrieval
from ..memory.search import Hits
from ..parallel import worker_count
from ..rae.scoring import PAPER_LAMBDA, PAPER_TAU
from .evaluator import CHUNK_BYTES, Ranking, chunk_queries, rank_chunks, stacked_rankings
from .methods import HEADLINE
from .selection_file import Selection
from .tune_settings import TuneSettings
from .validation_memory import ValidationRetrieval

WIDEN_STEPS = 3  # points a chosen value's grid may gain past each of its edges


class ValidationCurve:
    """The headline metrics (percent) of RAE at points (λ, τ, label share) on the held-out inputs, each point
    measured once: rows {"lambda", "tau", "label_share" (None: joint retrieval), metric...}, in the order
    measured. The score halves are computed a chunk of queries at a time and serve every λ: at 1.3M labels
    those of all 20,000 queries would take some 0.7 GB. A chunk's τs (their keys and halves) and then its (τ, λ)
    points (mixed and ranked) run on threads (numpy and scipy release the GIL there, as in evaluate), one a core up to
    RAEXMC_WORKERS: at the 1.3M shape's 22 labels a key, that ranking is most of the stage's time, and kNN's curve,
    one λ at many τs, gains as RAE's grid does; the rankings do not depend on the thread count, and the threads share
    one chunk's memory budget (evaluator.CHUNK_BYTES), as evaluate's do."""

    def __init__(self, retrieval: ValidationRetrieval, propensity_ab: tuple[float, float]):
        self.retrieval = retrieval
        self.evaluator = retrieval.evaluator(propensity_ab)
        self.rows: dict[tuple, dict[str, Any]] = {}

    def measure(self, lambdas: list[float], taus: list[float], shares: list[float | None]) -> None:
        """Add the points of the grid lambdas x taus x shares (None: the joint retrieval) not measured yet."""
        for share in shares:
            rae = RaeRetrieval(JOINT if share is None else SPLIT, share)
            points = [(tau, lam) for tau in taus for lam in lambdas if (lam, tau, rae.label_share) not in self.rows]
            if points:
                self._measure(points, rae)

    def _measure(self, points: list[tuple[float, float]], rae: RaeRetrieval) -> None:
        """Measure the (τ, λ) `points`, a chunk of queries at a time (evaluator.rank_chunks): each τ's keys and score
        halves once a chunk (on the threads, a τ each), then every point mixed and ranked (a point each), its rows
        added in `points`' order."""
        evaluator, inputs, labels = self.evaluator, self.retrieval.inputs, self.retrieval.labels
        models = {tau: self.retrieval.model(tau, rae) for tau, _ in points}
        ranked: dict[tuple[float, float], list[np.ndarray]] = {point: [] for point in points}
        workers = min(len(points), worker_count())

        def keys(tau: float, chunk: slice) -> Hits:
            return models[tau].keys(*((hits[0][chunk], hits[1][chunk]) for hits in (inputs, labels)))

        def halves(chunk: slice, tau: float) -> tuple[Hits, Any]:
            chunk_keys = keys(tau, chunk)
            return chunk_keys, models[tau].parts(*chunk_keys)

        def mixed(point: tuple[float, float], at_tau: dict) -> Any:
            tau, lam = point
            chunk_keys, parts = at_tau[tau]
            return models[tau].at(lam=lam).mix(parts, *chunk_keys)

        def rankings_of(chunk: slice, pool: ThreadPoolExecutor) -> list[Ranking]:
            at_tau = dict(zip(models, pool.map(partial(halves, chunk), models)))
            return [(point, partial(mixed, point, at_tau)) for point in points]

        width = keys(points[0][0], slice(0, 1))[0].shape[1]  # keys a query, the same at every τ
        # the threads share one chunk's budget, beside the score halves of every τ
        size = chunk_queries(evaluator.rae_values, width, CHUNK_BYTES // (workers + len(models)))
        rank_chunks(evaluator, size, rankings_of, lambda _rows, point, rows, _scores: ranked[point].append(rows),
                    workers)
        for tau, lam in points:
            summary = evaluator.summary(stacked_rankings(ranked.pop((tau, lam))))[0]
            self.rows[lam, tau, rae.label_share] = {"lambda": lam, "tau": tau, "label_share": rae.label_share,
                                                    **{k: summary[k] for k in HEADLINE}}

    def curve(self) -> list[dict[str, Any]]:
        return list(self.rows.values())


def past_edge(axis: str, grid: list[float], value: float, original: list[float]) -> list[float]:
    """The points past the edge of `grid` that the chosen `value` sits on (both edges for a grid of one point):
    τ doubled or halved; λ and the label share one edge gap further (0.1 for a grid of one point), within
    [0, 1]. None past an edge that already holds WIDEN_STEPS points beyond the `original` grid's."""
    grid = sorted(grid)
    points = []
    for edge, inner, sign, beyond in ((grid[-1], grid[-2:-1], 1, sum(v > max(original) for v in grid)),
                                      (grid[0], grid[1:2], -1, sum(v < min(original) for v in grid))):
        if value != edge or beyond >= WIDEN_STEPS:
            continue
        if axis == "tau":
            points.append(edge * 2.0 ** sign)
        elif (edge < 1.0) if sign > 0 else (edge > 0.0):  # λ and the share stop at 0 and 1
            gap = abs(edge - inner[0]) if inner else 0.1
            points.append(min(1.0, max(0.0, edge + sign * gap)))
    return [float(f"{point:.10g}") for point in points if point not in grid]


def widen_and_choose(curve: ValidationCurve, grids: dict[str, list], auto: tuple[str, ...], metric: str,
                     fixed: dict[str, float | None]) -> dict[str, Any]:
    """Measure the grid lambda x tau x label_share and choose (an axis not in `auto` at its `fixed` value); while
    a chosen value of an `auto` axis sits on an edge of its grid, widen that grid past it (past_edge) and
    choose again. Returns the best row; `grids` is left holding every point tried."""
    original = {axis: list(values) for axis, values in grids.items()}
    while True:
        curve.measure(grids["lambda"], grids["tau"], grids["label_share"])
        best = choose(curve.curve(), metric, **fixed)
        grew = False
        for axis in auto:
            new = past_edge(axis, grids[axis], best[axis], original[axis])
            grids[axis] = sorted([*grids[axis], *new])
            grew = grew or bool(new)
        if not grew:
            return best


def choose(curve: list[dict[str, Any]], metric: str, lam: float | None = None, tau: float | None = None,
           label_share: float | None = None) -> dict[str, Any]:
    """The curve's best row by `metric` among those at the fixed λ / τ / label share (None: free); ties go to
    the joint retrieval, then to the row nearest the paper's λ, then τ, then the share nearest 0.5."""
    fixed = {"lambda": lam, "tau": tau, "label_share": label_share}
    rows = [r for r in curve if all(value is None or r.get(axis) == value for axis, value in fixed.items())]
    if not rows:
        raise ValueError(f"no validation row at lambda={lam}, tau={tau}, label_share={label_share}")

    def share_distance(row: dict[str, Any]) -> float:
        share = row.get("label_share")
        return 0.0 if share is None else abs(share - DEFAULT_LABEL_SHARE)

    return min(rows, key=lambda r: (-r[metric], r.get("label_share") is not None, abs(r["lambda"] - PAPER_LAMBDA),
                                    abs(math.log(r["tau"] / PAPER_TAU)), share_distance(r), r["lambda"], r["tau"],
                                    r.get("label_share") or 0.0))


def select(retrieval: ValidationRetrieval, settings: TuneSettings,
           propensity_ab: tuple[float, float]) -> Selection:
    """The chosen λ, τ and retrieval, the validation metric there and at the fixed values, and the whole curve.

    For each retrieval tried (joint, split, or both where it is auto: one search serves both), a first round of
    λ x τ (split at its fixed share, 0.5 when auto), widened past an edge where λ or τ is chosen there; then, for a
    split retrieval with an automatic share, λ x share at split's chosen τ, widened likewise. The best row of the
    curve wins, ties to joint. The cost is |λ| x |τ| ranked points per retrieval plus |λ| x |shares| where the share
    is chosen, plus at most WIDEN_STEPS rows or columns past each edge of a chosen value."""
    curve, metric = ValidationCurve(retrieval, propensity_ab), settings.metric
    auto = tuple(axis for axis, value in (("lambda", settings.lam), ("tau", settings.tau)) if value is None)
    for mode in settings.retrievals:
        share = None if mode == JOINT else settings.split_share
        grids = {"lambda": settings.lambdas(), "tau": settings.taus(), "label_share": [share]}
        best = widen_and_choose(curve, grids, auto, metric, {"lam": settings.lam, "tau": settings.tau,
                                                             "label_share": share})
        if mode == SPLIT and settings.chooses_share:
            grids = {**grids, "tau": [best["tau"]], "label_share": settings.shares()}
            widen_and_choose(curve, grids, (*(axis for axis in auto if axis == "lambda"), "label_share"), metric,
                             {"lam": settings.lam, "tau": best["tau"], "label_share": None})
    rows = curve.curve()
    best = choose(rows, metric, settings.lam, settings.tau, None if settings.chooses_share else settings.fixed_share)
    fixed = choose([row for row in rows if row["label_share"] == settings.fixed_share], metric,
                   settings.fixed_lambda, settings.fixed_tau)
    return Selection(lam=best["lambda"], tau=best["tau"], retrieval=JOINT if best["label_share"] is None else SPLIT,
                     label_share=best["label_share"], metric=metric,
                     auto={"lambda": settings.lam is None, "tau": settings.tau is None,
                           "retrieval": settings.retrieval is None, "label_share": settings.chooses_share},
                     val_value=best[metric], fixed_lambda=settings.fixed_lambda, fixed_tau=settings.fixed_tau,
                     fixed_label_share=settings.fixed_share, fixed_val_value=fixed[metric],
                     val_queries=len(retrieval.held.val_rows), val_folds=retrieval.held.folds,
                     memory_inputs=len(retrieval.held.rest_rows), memory_input_keys=retrieval.keys_per_fold,
                     val_fraction=settings.val_fraction, val_max_queries=settings.val_max_queries,
                     val_seed=settings.val_seed, val_split_from=settings.fraction_key.split(".")[0], b=settings.b,
                     validation=rows)
