"""RAE-XMC as one object: the memory's values, its keys' prior, which keys it retrieves and its settings λ, τ, b.

Every caller that turns retrieved keys into label scores goes through `RaeModel`: the Predictor, the evaluate
stage's RAE and its λ and b sweeps, the tune stage's validation curve and per-query λ fit, and training's
validation. A change to how RAE scores lands here, once. Reading and writing a model folder is
rae/model_folder.py (kept apart so that training, which scores but never loads one, does not depend on it).

The model scores RAE's keys as `keys` (from a search of its input keys and one of its label keys) or `retrieve`
(from its own search) return them: the retrieval's keys at b, the prior's τ·log n already added to the merged
input keys' similarities. `scores` then takes p = softmax(sims / τ) over the first b and mixes p · V at λ, a
number or, per query, a λ model's choice (rae/query_lambda.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Protocol, Union

import numpy as np
import scipy.sparse as sp

from ..memory.merge import RaeRetrieval, rae_keys
from ..memory.prior import add_log_prior
from ..memory.search import Hits
from .ranking import top_k
from .scoring import (PAPER_B, PAPER_LAMBDA, PAPER_TAU, Parts, check_b, check_lambda, check_tau, combine_per_query,
                      score_parts)


class QueryLambdaModel(Protocol):
    """What scoring needs of a per-query λ model (rae.query_lambda.QueryLambda; not imported here, so that
    training's validation, which scores at a fixed λ, does not depend on the λ model's code)."""

    tau: float
    b: int | None
    fallback: float  # the scalar λ it falls back to, saved as the folder's λ

    def lambdas(self, ids: np.ndarray, sims: np.ndarray, Y_train: sp.spmatrix, parts: Any = None) -> np.ndarray: ...

    def to_json(self) -> dict[str, Any]: ...


Lambda = Union[float, QueryLambdaModel]


class KeySearch(Protocol):
    """What the model needs of a search over its keys (memory.merge.JointSearch)."""

    def rae_search(self, queries: np.ndarray, b: int, retrieval: RaeRetrieval) -> Hits: ...


@dataclass(frozen=True)
class RaeSettings:
    """RAE's inference settings, checked: λ (a number in [0, 1], or a per-query λ model), τ > 0, b >= 1 (None:
    every retrieved key) and the retrieval (joint, or split at a label share); by default the paper's."""

    lam: Lambda = PAPER_LAMBDA
    tau: float = PAPER_TAU
    b: int | None = PAPER_B
    retrieval: RaeRetrieval = RaeRetrieval()

    def __post_init__(self) -> None:
        if not self.per_query:
            object.__setattr__(self, "lam", check_lambda(self.lam))
        object.__setattr__(self, "tau", check_tau(self.tau))
        object.__setattr__(self, "b", check_b(self.b))

    @property
    def per_query(self) -> bool:
        """Whether λ is a model that picks one per query."""
        return hasattr(self.lam, "lambdas")


@dataclass(frozen=True)
class RaeModel:
    """The memory's values V (its input keys' label rows; the label keys' are the identity), the log member count
    of each input key when the prior is on (memory/prior.py), the settings, and optionally a search over the keys
    (input keys first, then labels), which `retrieve`, `scores_for` and `top_k` need."""

    values: sp.csr_matrix
    settings: RaeSettings
    log_counts: np.ndarray | None = None
    search: KeySearch | None = None

    def __post_init__(self) -> None:
        if self.log_counts is not None and len(self.log_counts) != self.num_inputs:
            raise ValueError(f"{len(self.log_counts)} member counts for {self.num_inputs} input keys")

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
        """RAE's keys at b in joint ids, best first, from a search of the input keys and one of the label keys
        (each `retrieval.depth(b)` deep): taken as the retrieval says, with the prior added."""
        settings = self.settings
        return rae_keys(settings.retrieval, inputs, labels, self.num_inputs, settings.b, self.log_counts, settings.tau)

    def retrieve(self, queries: np.ndarray) -> Hits:
        """RAE's keys at b for query embeddings, from this model's search."""
        if self.search is None:
            raise ValueError("this RAE model has no search: load it with an index")
        settings = self.settings
        return add_log_prior(self.search.rae_search(queries, settings.b, settings.retrieval), self.log_counts,
                             settings.tau)

    def parts(self, ids: np.ndarray, sims: np.ndarray) -> Parts:
        """The two score halves (P_inputs · V, P_labels) of RAE's keys at (τ, b): they serve every λ."""
        return score_parts(ids, sims, self.values, self.settings.tau, self.settings.b)

    def mix(self, parts: Parts, ids: np.ndarray, sims: np.ndarray) -> sp.csr_matrix:
        """The label scores from the score halves of the keys (ids, sims), at λ or at each query's own λ (read
        off the same keys and halves)."""
        lam = self.settings.lam
        if self.settings.per_query:
            lam = lam.lambdas(ids, sims, self.values, parts)
        return combine_per_query(parts, lam)

    def scores(self, ids: np.ndarray, sims: np.ndarray) -> sp.csr_matrix:
        """CSR (queries, labels) label scores of RAE's keys (as `keys` or `retrieve` return them)."""
        return self.mix(self.parts(ids, sims), ids, sims)

    def scores_for(self, queries: np.ndarray) -> sp.csr_matrix:
        """Label scores of query embeddings: retrieve, then score."""
        return self.scores(*self.retrieve(queries))

    def top_k(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k best labels of each query embedding and their scores (best_labels)."""
        return best_labels(self.scores_for(queries), k)


def best_labels(scores: sp.csr_matrix, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(labels, values), both (queries, k), best first: label ids (ties to the smaller id) and their scores;
    label -1 and value 0 where a query scores fewer than k labels."""
    labels = top_k(scores, k)
    values = np.zeros(labels.shape)
    rows, ranks = np.nonzero(labels >= 0)
    values[rows, ranks] = np.asarray(scores[rows, labels[rows, ranks]]).ravel()
    return labels, values

