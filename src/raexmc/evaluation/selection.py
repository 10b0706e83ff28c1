"""Choosing RAE's λ and τ on held-out training inputs (`infer.lambda: auto`, `infer.tau: auto`), never on the test set.

The right λ moves with the dataset and with training, so it is chosen on data the test never sees:
the held-out training inputs (the split training's validation uses) query a memory built like the
evaluation's from the training inputs that remain, keys [X_rest; Z] and values [λ·Y_rest; (1−λ)·I].
The held-out inputs are not keys of that memory, so none can find itself (which would make kNN look
perfect). A smaller memory (`memory.keep` < 1) is selected from the remaining inputs by the memory
stage's method, so that λ and τ are chosen for the memory that evaluate and predict search. One
exact joint top-b search serves the whole grid: one softmax per τ (`score_parts`), one sparse mix
per λ (`combine`), each ranked and scored by the Evaluator as the test set is. The best
(λ, τ) by `infer.auto_metric` wins; among equal values (metrics are rounded to 0.01 points) the one
nearest the paper's λ = 0.5, τ = 0.04 (τ by ratio) wins.

At most `infer.val_max_queries` of the held-out inputs query (a seeded subset): the search costs
queries x (memory inputs + labels) products, which at 5% of N held out would grow with N squared; a
fixed number of queries makes it grow with N. The held-out inputs beyond the cap stay out of the
memory all the same: the memory is the one every cap queries, so the cap only changes how many
queries measure it (the estimate's noise), not what is measured.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..checks import positive_int
from ..encoder.vectors import load_embeddings
from ..errors import PARAMS_FILE, ConfigError, DataError
from ..io import read_json
from ..memory.input_memory import MemorySettings
from ..memory.key_selection import select_keys
from ..memory.keys_values import stack_rows, training_values
from ..memory.prior import add_log_prior
from ..memory.prototypes import label_prototypes
from ..memory.search import Hits
from ..memory.torch_index import top_k_search
from ..params import Params
from ..rae.scoring import PAPER_LAMBDA, PAPER_TAU, check_b, check_lambda, check_tau, combine, score_parts
from .evaluator import HEADLINE, Evaluator, query_chunks, stacked_rankings

AUTO = "auto"
SELECTION_FILE = "selection.json"


@dataclass(frozen=True)
class TuneSettings:
    """The `infer` keys the choice reads; `lam` or `tau` None means "auto" (chosen on validation)."""

    lam: float | None
    tau: float | None
    lambda_grid: tuple[float, ...]
    tau_grid: tuple[float, ...]
    metric: str
    b: int
    val_fraction: float
    val_max_queries: int
    val_seed: int
    relevance: str

    @classmethod
    def from_params(cls, p: Params) -> TuneSettings:
        """Every value checked before any work, each failure one ConfigError naming its key."""
        fraction = p.typed("infer.val_fraction", float)
        if not 0.0 < fraction < 1.0:
            raise ConfigError(f"infer.val_fraction must be in (0, 1), got {fraction!r}", p.path, "infer.val_fraction")
        metric = p.typed("infer.auto_metric", str)
        if metric not in HEADLINE:
            raise ConfigError(f"infer.auto_metric must be one of {', '.join(HEADLINE)}, got {metric!r}",
                              p.path, "infer.auto_metric")
        return cls(lam=_number_or_auto(p, "infer.lambda", check_lambda, "a number in [0, 1]"),
                   tau=_number_or_auto(p, "infer.tau", check_tau, "a number > 0"),
                   lambda_grid=p.grid("infer.lambda_sweep", check_lambda, "numbers in [0, 1]"),
                   tau_grid=p.grid("infer.tau_grid", check_tau, "numbers > 0"),
                   metric=metric, b=check_b(p.typed("infer.b", int)), val_fraction=fraction,
                   val_max_queries=positive_int(p.get("infer.val_max_queries"), "infer.val_max_queries", p.path,
                                                "infer.val_max_queries"),
                   val_seed=p.integer("infer.val_seed", 0), relevance=p.typed("infer.relevance", str))

    @property
    def fixed_lambda(self) -> float:
        """The hand-set λ (the paper's when λ is auto): what the choice is compared with."""
        return PAPER_LAMBDA if self.lam is None else self.lam

    @property
    def fixed_tau(self) -> float:
        return PAPER_TAU if self.tau is None else self.tau

    def lambdas(self) -> list[float]:
        """The λ of the validation curve: the grid and the fixed value."""
        return sorted({*self.lambda_grid, self.fixed_lambda})

    def taus(self) -> list[float]:
        return sorted({*self.tau_grid, self.fixed_tau})


def _number_or_auto(p: Params, key: str, check: Callable[[Any], float], text: str) -> float | None:
    value = p.get(key)
    return None if value == AUTO else p.checked(key, [value], check, f"{text} or {AUTO}", value)[0]


@dataclass(frozen=True)
class HeldOutLabels:
    """What the tune stage takes of Y_train: taken before the memory's keys are built, so that the stage
    can drop Y_train (0.6 GB at 1.3M inputs) before the search."""

    Y_val: sp.csr_matrix        # the held-out inputs' labels
    Y_rest: sp.csr_matrix       # training_values of the remaining inputs
    exclude: sp.csr_matrix      # the held-out inputs' filtered pairs
    val_rows: np.ndarray        # rows of the training inputs that query
    rest_rows: np.ndarray       # rows of the training inputs the memory keys are chosen from


@dataclass
class ValidationRetrieval:
    """The held-out training inputs' joint top-b over [X_rest; Z] and what scoring them needs; a
    per-query λ model is fitted on the same retrieval."""

    ids: np.ndarray             # (n_val, b) key ids: 0..K-1 the memory's input keys, K.. labels
    sims: np.ndarray
    held: HeldOutLabels
    memory_values: sp.csr_matrix | None = None   # the selected keys' values (None: every remaining input, Y_rest)
    log_counts: np.ndarray | None = None         # their log member counts when the prior is on

    def evaluator(self, propensity_ab: tuple[float, float]) -> Evaluator:
        """Ranks and scores the held-out inputs as the test set is ranked and scored."""
        held = self.held
        return Evaluator(held.Y_rest, held.Y_val, held.exclude, propensity_ab, self.memory_values)

    def hits(self, tau: float) -> Hits:
        """The retrieval as RAE scores it at `tau`: with the prior added when the memory has one."""
        hits = (self.ids, self.sims)
        return hits if self.log_counts is None else add_log_prior(hits, self.log_counts, tau)


def held_out_labels(Y_train: sp.csr_matrix, filters_train: sp.csr_matrix, rest_rows: np.ndarray,
                    val_rows: np.ndarray, relevance: str = "binary") -> HeldOutLabels:
    """The labels of the held-out inputs (`val_rows`) and the values of the remaining ones (`rest_rows`)."""
    if len(val_rows) == 0 or len(rest_rows) == 0:
        raise ConfigError(f"infer.val_fraction leaves {len(val_rows)} held-out and {len(rest_rows)} memory inputs "
                          f"of {Y_train.shape[0]}: both need at least one", PARAMS_FILE, "infer.val_fraction")
    return HeldOutLabels(sp.csr_matrix(Y_train[val_rows]), training_values(Y_train[rest_rows], relevance, copy=False),
                         sp.csr_matrix(filters_train[val_rows]), np.asarray(val_rows), np.asarray(rest_rows))


def validation_retrieval(embeddings: str | os.PathLike, held: HeldOutLabels, b: int, device: str = "cpu",
                         memory: MemorySettings | None = None) -> ValidationRetrieval:
    """Exact joint top-b of the held-out inputs over the remaining ones, or the keys `memory` selects from
    them, and the labels, from the embeddings folder. Its files are mapped only while the keys and queries
    are copied out of them: the search holds those alone (the mapped pages count as the stage's memory)."""
    train_inputs, labels = (load_embeddings(embeddings, split) for split in ("train", "labels"))
    input_keys, memory_values, log_counts = (train_inputs, held.rest_rows), None, None
    if memory is not None and not memory.full:
        selected = select_keys(train_inputs[held.rest_rows], held.Y_rest, memory.keep, memory.method, memory.seed,
                               labels=labels)
        input_keys, memory_values = (selected.keys, None), selected.values
        log_counts = np.log(selected.counts.astype(np.float64)) if memory.prior else None
    if memory is not None and memory.prototypes > 0:  # made from the memory's inputs only, as the memory stage does
        labels = label_prototypes(train_inputs, held.Y_rest, labels, memory.prototypes, rows=held.rest_rows)
    keys = stack_rows([input_keys, (labels, None)])
    queries = np.ascontiguousarray(train_inputs[held.val_rows], dtype=np.float32)
    del train_inputs, labels, input_keys
    ids, sims = top_k_search(keys, device, progress=True)(queries, b)
    return ValidationRetrieval(ids, sims, held, memory_values, log_counts)


def validation_curve(retrieval: ValidationRetrieval, lambdas: list[float], taus: list[float], b: int,
                     propensity_ab: tuple[float, float]) -> list[dict[str, float]]:
    """The headline metrics (percent) of every (λ, τ) on the held-out inputs, rows {"lambda", "tau", metric...}.
    The score halves are computed a chunk of queries at a time and serve every λ: at 1.3M labels those of
    all 20,000 queries would take some 0.7 GB."""
    evaluator = retrieval.evaluator(propensity_ab)
    rows = []
    for tau in taus:
        ids, sims = retrieval.hits(tau)
        ranked: dict[float, list[np.ndarray]] = {lam: [] for lam in lambdas}
        for chunk in query_chunks(len(ids)):
            parts = score_parts(ids[chunk], sims[chunk], evaluator.rae_values, tau, b)
            for lam in lambdas:
                ranked[lam].append(evaluator.rank_rows(chunk, combine(parts, lam)))
            del parts
        for lam in lambdas:
            summary = evaluator.summary(stacked_rankings(ranked.pop(lam)))[0]
            rows.append({"lambda": lam, "tau": tau, **{k: summary[k] for k in HEADLINE}})
    return rows


def choose(curve: list[dict[str, float]], metric: str, lam: float | None = None,
           tau: float | None = None) -> dict[str, float]:
    """The curve's best row by `metric` among those at the fixed λ / τ (None: free); ties go to the
    row nearest the paper's λ, then τ."""
    rows = [r for r in curve if (lam is None or r["lambda"] == lam) and (tau is None or r["tau"] == tau)]
    if not rows:
        raise ValueError(f"no validation row at lambda={lam}, tau={tau}")
    return min(rows, key=lambda r: (-r[metric], abs(r["lambda"] - PAPER_LAMBDA), abs(math.log(r["tau"] / PAPER_TAU)),
                                    r["lambda"], r["tau"]))


def select(retrieval: ValidationRetrieval, settings: TuneSettings,
           propensity_ab: tuple[float, float]) -> dict[str, Any]:
    """The chosen λ and τ, the validation metric there and at the fixed values, and the whole curve."""
    curve = validation_curve(retrieval, settings.lambdas(), settings.taus(), settings.b, propensity_ab)
    best = choose(curve, settings.metric, settings.lam, settings.tau)
    fixed = choose(curve, settings.metric, settings.fixed_lambda, settings.fixed_tau)
    return {"lambda": best["lambda"], "tau": best["tau"], "metric": settings.metric,
            "auto": {"lambda": settings.lam is None, "tau": settings.tau is None},
            "val_value": best[settings.metric],
            "fixed_lambda": settings.fixed_lambda, "fixed_tau": settings.fixed_tau,
            "fixed_val_value": fixed[settings.metric],
            "val_queries": len(retrieval.held.val_rows), "memory_inputs": len(retrieval.held.rest_rows),
            "memory_input_keys": len(retrieval.held.rest_rows) if retrieval.memory_values is None
            else retrieval.memory_values.shape[0],
            "val_fraction": settings.val_fraction, "val_max_queries": settings.val_max_queries,
            "val_seed": settings.val_seed, "b": settings.b,
            "validation": curve}


def read_selection(folder: str | os.PathLike) -> dict[str, Any]:
    """The tune stage's choice, checked: evaluation and the packaged memory run RAE at its λ and τ."""
    path = Path(folder) / SELECTION_FILE
    if not path.is_file():
        raise DataError("no selection file: run the tune stage", path)
    selection = read_json(path)
    if not isinstance(selection, dict):
        raise DataError("not a JSON object", path)
    for key, check in (("lambda", check_lambda), ("tau", check_tau)):
        try:
            check(selection.get(key))
        except ConfigError:
            raise DataError(f"{key} must be a number in its range, got {selection.get(key)!r}", path, key) from None
    return selection


def lambda_rows(selection: dict[str, Any], test_sweep: list[dict[str, float]]) -> list[dict[str, float]]:
    """The chosen metric against λ at the chosen τ, on validation beside test: rows {"lambda", "validation", "test"}."""
    metric = selection["metric"]
    validation = {r["lambda"]: r[metric] for r in selection["validation"] if r["tau"] == selection["tau"]}
    return [{"lambda": r["lambda"], "validation": validation[r["lambda"]], "test": r[metric]}
            for r in test_sweep if r["lambda"] in validation]
