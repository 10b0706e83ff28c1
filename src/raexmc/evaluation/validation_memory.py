"""The validation memory of the tune stage: which training inputs are held out (one fold, or several pooled), and
the exact retrieval of those held-out inputs over a memory built, like the evaluation's, from the inputs that
remain; every choice on held-out inputs (λ, τ, keep, α, kNN's τ) measures its curve on it."""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..data.held_out import query_sample, validation_folds
from ..encoder.vectors import load_embeddings
from ..errors import PARAMS_FILE, ConfigError
from ..memory.input_memory import MemorySettings
from ..memory.key_selection import select_keys
from ..memory.keys_values import training_values
from ..memory.merge import RaeRetrieval
from ..memory.prior import log_prior
from ..memory.prototypes import label_prototypes
from ..memory.search import Hits
from ..memory.torch_index import exact_index
from ..rae.model import RaeModel, RaeSettings
from .evaluator import Evaluator, FoldedEvaluator
from .tune_settings import TuneSettings


@dataclass(frozen=True)
class HeldOutLabels:
    """What the tune stage takes of Y_train before the memory's keys are built, so that it can drop Y_train."""

    Y_val: sp.csr_matrix        # the held-out inputs' labels
    Y_rest: sp.csr_matrix       # training_values of the remaining inputs
    exclude: sp.csr_matrix      # the held-out inputs' filtered pairs
    val_rows: np.ndarray        # rows of the training inputs that query
    rest_rows: np.ndarray       # rows of the training inputs the memory keys are chosen from
    parts: tuple[HeldOutLabels, ...] = ()   # where several folds are pooled (pooled_held): each fold's own

    @property
    def folds(self) -> int:
        return max(1, len(self.parts))


@dataclass
class ValidationRetrieval:
    """The held-out training inputs' top-b over the memory's input keys and over the labels, and what scoring
    them needs."""

    inputs: Hits
    labels: Hits
    b: int
    held: HeldOutLabels
    memory_values: sp.csr_matrix                 # the memory's input keys' values (Y_rest when it keeps them all)
    log_counts: np.ndarray | None = None         # their log member counts when the prior is on

    @property
    def input_keys(self) -> int:
        """The input keys, all folds' where pooled: where the label keys' ids start in RAE's joint ids."""
        return self.memory_values.shape[0]

    @property
    def keys_per_fold(self) -> int:
        return self.input_keys // self.held.folds  # every fold's memory has as many

    def evaluator(self, propensity_ab: tuple[float, float]) -> Evaluator:
        held = self.held
        if not held.parts:
            return Evaluator(held.Y_rest, held.Y_val, held.exclude, propensity_ab, self.memory_values)
        folds = tuple(Evaluator(part.Y_rest, part.Y_val, part.exclude, propensity_ab) for part in held.parts)
        return FoldedEvaluator(held.Y_rest, held.Y_val, held.exclude, propensity_ab, self.memory_values, folds)

    def model(self, tau: float, rae: RaeRetrieval = RaeRetrieval()) -> RaeModel:
        """RAE on this memory at τ, b and retrieval `rae` (at the paper's λ: the curve sets each)."""
        return RaeModel(self.memory_values, RaeSettings(tau=tau, b=self.b, retrieval=rae), self.log_counts)


def held_out_labels(Y_train: sp.csr_matrix, filters_train: sp.csr_matrix, rest_rows: np.ndarray,
                    val_rows: np.ndarray, relevance: str = "binary",
                    fraction_key: str = "infer.val_fraction") -> HeldOutLabels:
    """The labels of the held-out inputs (`val_rows`) and the values of the remaining ones (`rest_rows`)."""
    if len(val_rows) == 0 or len(rest_rows) == 0:
        raise ConfigError(f"{fraction_key} leaves {len(val_rows)} held-out and {len(rest_rows)} memory inputs "
                          f"of {Y_train.shape[0]}: both need at least one", PARAMS_FILE, fraction_key)
    return HeldOutLabels(sp.csr_matrix(Y_train[val_rows]), training_values(Y_train[rest_rows], relevance, copy=False),
                         sp.csr_matrix(filters_train[val_rows]), np.asarray(val_rows), np.asarray(rest_rows))


def held_out_folds(Y_train: sp.csr_matrix, filters_train: sp.csr_matrix, settings: TuneSettings) -> list[HeldOutLabels]:
    """Each validation fold's held-out labels (data.held_out.validation_folds), at most `val_max_queries` querying."""
    folds = validation_folds(Y_train.shape[0], settings.val_fraction, settings.val_seed,
                             settings.folds_for(Y_train.shape[0]))
    return [held_out_labels(Y_train, filters_train, rest_rows,
                            query_sample(held_out, settings.val_max_queries, settings.val_seed), settings.relevance,
                            settings.fraction_key)
            for rest_rows, held_out in folds]


def pooled_held(folds: list[HeldOutLabels]) -> HeldOutLabels:
    """Every fold's queries as one set, each fold kept in `parts` to score its queries (FoldedEvaluator); `Y_rest`
    and `rest_rows` the first fold's (the memory's size, the same at every fold)."""
    if len(folds) == 1:
        return folds[0]
    first = folds[0]
    return HeldOutLabels(sp.csr_matrix(sp.vstack([fold.Y_val for fold in folds])), first.Y_rest,
                         sp.csr_matrix(sp.vstack([fold.exclude for fold in folds])),
                         np.concatenate([fold.val_rows for fold in folds]), first.rest_rows, tuple(folds))


def pooled_hits(hits: list[Hits], offsets: list[int] | None = None) -> Hits:
    """The hits of consecutive groups of queries as one, each group's ids (where found) shifted by its offset."""
    offsets = offsets or [0] * len(hits)
    ids = np.concatenate([np.where(found >= 0, found + offset, found) for (found, _), offset in zip(hits, offsets)])
    return ids, np.concatenate([sims for _, sims in hits])


def pooled(folds: list[ValidationRetrieval], held: HeldOutLabels) -> ValidationRetrieval:
    """Several folds' validation retrievals as one (`held` their pooled_held): the queries stacked, the folds'
    memories side by side as one set of input keys, so that each query's RAE scores its own fold's memory."""
    if len(folds) == 1:
        return folds[0]
    offsets = np.cumsum([0] + [fold.input_keys for fold in folds[:-1]]).tolist()
    counts = [fold.log_counts for fold in folds]
    return ValidationRetrieval(pooled_hits([fold.inputs for fold in folds], offsets),
                               pooled_hits([fold.labels for fold in folds]), folds[0].b, held,
                               sp.csr_matrix(sp.vstack([fold.memory_values for fold in folds])),
                               None if counts[0] is None else np.concatenate(counts))


def validation_retrieval(embeddings: str | os.PathLike, held: HeldOutLabels, b: int, device: str = "cpu",
                         memory: MemorySettings | None = None, labels: Hits | None = None) -> ValidationRetrieval:
    """Exact top-b of the held-out inputs over the remaining ones (or the keys `memory` selects from them) and over
    the labels (`labels` where already searched)."""
    train_inputs = load_embeddings(embeddings, "train")
    input_keys, memory_values, log_counts = train_inputs[held.rest_rows], held.Y_rest, None
    if memory is not None and not memory.full:
        selected = select_keys(input_keys, held.Y_rest, memory.keep, memory.method, memory.seed,
                               labels=load_embeddings(embeddings, "labels"))
        input_keys, memory_values = selected.keys, selected.values
        log_counts = log_prior(memory.prior, selected.counts)
    input_keys = np.ascontiguousarray(input_keys, dtype=np.float32)
    queries = np.ascontiguousarray(train_inputs[held.val_rows], dtype=np.float32)
    del train_inputs
    found = exact_index(input_keys, device).search(queries, b, progress=True)
    del input_keys
    if labels is None:
        labels = label_search(embeddings, held, b, device, 0.0 if memory is None else memory.prototypes)
    return ValidationRetrieval(found, labels, b, held, memory_values, log_counts)


def label_search(embeddings: str | os.PathLike, held: HeldOutLabels, b: int, device: str = "cpu",
                 prototypes: float = 0.0) -> Hits:
    """Exact top-b of the held-out inputs over the labels' keys, or their prototypes at α `prototypes` made from all
    the remaining inputs (whatever the memory keeps)."""
    train_inputs, labels = (load_embeddings(embeddings, split) for split in ("train", "labels"))
    if prototypes > 0:
        labels = label_prototypes(train_inputs, held.Y_rest, labels, prototypes, rows=held.rest_rows)
    labels = np.ascontiguousarray(labels, dtype=np.float32)
    queries = np.ascontiguousarray(train_inputs[held.val_rows], dtype=np.float32)
    del train_inputs
    return exact_index(labels, device).search(queries, b, progress=True)
