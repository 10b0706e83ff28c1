"""RAE-XMC as one object. Every caller that turns retrieved keys into label scores (predict, serve, evaluate,
tune, training's validation) goes through `RaeModel`, so a change to how RAE scores lands here, once."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..data.dataset import Text
from ..data.label_records import LabelRecords
from ..encoder.tokens import FIELDS, text_of
from ..memory.merge import JointSearch, RaeRetrieval, rae_keys
from ..memory.search import Hits
from .model_folder import PARTS, read_model, save_model
from .queries import checked_k
from .ranking import top_k
from .scoring import PAPER_B, PAPER_LAMBDA, PAPER_TAU, Parts, check_b, check_lambda, check_tau, combine, score_parts

PHASES = ("encode_s", "search_s", "score_s")


@dataclass
class Timing:
    """Where a prediction's time goes: wall seconds per phase over `queries` queries."""

    queries: int = 0
    encode_s: float = 0.0
    search_s: float = 0.0
    score_s: float = 0.0

    def add(self, other: Timing) -> None:
        self.queries += other.queries
        for phase in PHASES:
            setattr(self, phase, getattr(self, phase) + getattr(other, phase))

    def per_query_ms(self) -> dict[str, float]:
        n = max(self.queries, 1)
        parts = {phase[:-2]: 1000 * getattr(self, phase) / n for phase in PHASES}
        return {"total": sum(parts.values()), **parts}


@dataclass(frozen=True)
class RaeSettings:
    """RAE's inference settings, by default the paper's; b None: every retrieved key."""

    lam: float = PAPER_LAMBDA
    tau: float = PAPER_TAU
    b: int | None = PAPER_B
    retrieval: RaeRetrieval = RaeRetrieval()

    def __post_init__(self) -> None:
        for name, check in (("lam", check_lambda), ("tau", check_tau), ("b", check_b)):
            object.__setattr__(self, name, check(getattr(self, name)))


@dataclass(frozen=True)
class RaeModel:
    """The memory's values V (input keys' label rows; the label keys' are the identity), the prior's log member
    counts, optionally a search over the keys; a model that answers texts also has its encoder and labels.
    `about`: where it came from, for the model card."""

    values: sp.csr_matrix
    settings: RaeSettings
    log_counts: np.ndarray | None = None
    search: JointSearch | None = None
    encoder: Any = None
    labels: LabelRecords | None = None
    input_fields: str = FIELDS[-1]
    about: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.log_counts is not None and len(self.log_counts) != self.num_inputs:
            raise ValueError(f"{len(self.log_counts)} member counts for {self.num_inputs} input keys")
        if self.labels is not None and len(self.labels) != self.num_labels:
            raise ValueError(f"{len(self.labels)} label records for {self.num_labels} labels")
        if self.input_fields not in FIELDS:
            raise ValueError(f"input_fields must be one of {', '.join(FIELDS)}, got {self.input_fields!r}")

    @classmethod
    def load(cls, folder: str | os.PathLike, device: str = "cpu", threads: int = 0,
             needs: tuple[str, ...] = PARTS) -> RaeModel:
        """The model `save` wrote into `folder`; a folder without one of the parts `needs` is refused (`needs=()`
        loads a bare scoring model too). threads 0: torch's setting."""
        if threads:
            import torch

            torch.set_num_threads(threads)  # before the encoder is read: an int8 one takes the setting when it is built
        fields = read_model(folder, device, threads, needs)
        return cls(settings=RaeSettings(**fields.pop("settings")), **fields)

    def save(self, folder: str | os.PathLike) -> None:
        """Write this model into `folder` atomically: self-contained (no path inside points out), with a model card."""
        save_model(self, folder)

    @property
    def num_inputs(self) -> int:
        return self.values.shape[0]

    @property
    def num_labels(self) -> int:
        return self.values.shape[1]

    def at(self, **changes: Any) -> RaeModel:
        """This model with some settings changed (lam, tau, b, retrieval): the sweeps' points."""
        return dataclasses.replace(self, settings=dataclasses.replace(self.settings, **changes))

    def keys(self, inputs: Hits, labels: Hits) -> Hits:
        """RAE's keys at b in joint ids, best first, from the input and label searches, with the prior added."""
        settings = self.settings
        return rae_keys(settings.retrieval, inputs, labels, self.num_inputs, settings.b, self.log_counts, settings.tau)

    def retrieve(self, queries: np.ndarray) -> Hits:
        if self.search is None:
            raise ValueError("this RAE model has no search: give it one, or load a saved model that holds its indexes")
        return self.keys(*self.search.search_parts(queries, self.settings.retrieval.depth(self.settings.b)))

    def parts(self, ids: np.ndarray, sims: np.ndarray) -> Parts:
        return score_parts(ids, sims, self.values, self.settings.tau, self.settings.b)

    def mix(self, parts: Parts) -> sp.csr_matrix:
        """The label scores from the score halves of the retrieved keys at λ."""
        return combine(parts, self.settings.lam)

    def scores(self, ids: np.ndarray, sims: np.ndarray) -> sp.csr_matrix:
        return self.mix(self.parts(ids, sims))

    def scores_for(self, queries: np.ndarray) -> sp.csr_matrix:
        return self.scores(*self.retrieve(queries))

    def top_k(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return best_labels(self.scores_for(queries), k)

    def query_text(self, query: Text | str) -> str:
        """A record through the training inputs' recipe (a Titles model sees only a title, as in training)."""
        return query if isinstance(query, str) else text_of(query, self.input_fields)

    def predict(self, queries: list[Text | str], k: int = 10) -> tuple[list[list[dict[str, Any]]], Timing]:
        """Per query, its top-k labels best first (label_answer), and where the time went."""
        if self.encoder is None or self.labels is None:
            raise ValueError("this RAE model has no encoder or labels: RaeModel.load a saved one")
        k = checked_k(k, self.num_labels)
        timing = Timing(queries=len(queries))
        if not queries:
            return [], timing
        started = time.perf_counter()
        embedded = self.encoder.embed_texts([self.query_text(query) for query in queries])
        encoded = time.perf_counter()
        keys = self.retrieve(embedded)
        searched = time.perf_counter()
        labels, values = best_labels(self.scores(*keys), k)
        results = [[self.label_answer(label, value) for label, value in zip(row_labels, row_values) if label >= 0]
                   for row_labels, row_values in zip(labels, values)]  # -1 pads a row with fewer labels scored
        timing.encode_s, timing.search_s = encoded - started, searched - encoded
        timing.score_s = time.perf_counter() - searched
        return results, timing

    def label_answer(self, row: int, score: float) -> dict[str, Any]:
        """One label of an answer: its row (column in the label matrices), its dataset's id, text and score."""
        label_id, text = self.labels[row]
        return {"label": int(row), "id": label_id, "text": text, "score": round(float(score), 6)}


def best_labels(scores: sp.csr_matrix, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(labels, values), both (queries, k), best first (ties to the smaller id); -1 and 0 past a query's labels."""
    labels = top_k(scores, k)
    values = np.zeros(labels.shape)
    rows, ranks = np.nonzero(labels >= 0)
    values[rows, ranks] = np.asarray(scores[rows, labels[rows, ranks]]).ravel()
    return labels, values

