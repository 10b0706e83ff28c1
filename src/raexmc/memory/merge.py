"""The joint search without a joint index: the top-k over [X_train; Z_labels] is the merge of each set's top-k, so
two indexes, each key stored once, serve RAE, the dual encoder and kNN. Split retrieval exists because where inputs
outnumber labels the joint top-b holds few label keys (0.8 % of the top-200 at 593 labels / 21k inputs).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, get_args

import numpy as np

from ..checks import positive_int
from ..errors import DataError
from ..settings import Retrieval, Share, record_value
from .prior import add_log_prior
from .search import Hits, empty_result, sort_rows

MERGE_ROWS = 8_192  # rows merged at once: the sort's scratch (about 32 bytes per candidate) stays near 100 MB at b=200


def merge_top_k(hits_a: Hits, offset_a: int, hits_b: Hits, offset_b: int, k: int) -> Hits:
    """The top-k of two searches of disjoint key sets in the joint ids (key i of set a is offset_a + i)."""
    k = positive_int(k, "k")
    (ids_a, sims_a), (ids_b, sims_b) = hits_a, hits_b
    if ids_a.shape[0] != ids_b.shape[0]:
        raise DataError(f"cannot merge searches of {ids_a.shape[0]} and {ids_b.shape[0]} queries")
    ids, sims = empty_result(ids_a.shape[0], k)
    width = min(k, ids_a.shape[1] + ids_b.shape[1])
    for start in range(0, ids.shape[0], MERGE_ROWS):
        rows = slice(start, start + MERGE_ROWS)
        both_ids = np.hstack([_shift(ids_a[rows], offset_a), _shift(ids_b[rows], offset_b)])
        both_sims = np.hstack([sims_a[rows], sims_b[rows]]).astype(np.float32, copy=False)
        merged_ids, merged_sims = sort_rows(both_ids, both_sims)
        ids[rows, :width], sims[rows, :width] = merged_ids[:, :width], merged_sims[:, :width]
    return ids, sims


def _shift(ids: np.ndarray, offset: int) -> np.ndarray:
    """Ids moved into the joint id space; the -1 padding stays -1."""
    return np.where(ids >= 0, ids.astype(np.int64) + int(offset), -1)


class JointSearch:
    """Searches [X_train; Z_labels] through an index of the inputs (joint ids 0..N-1) and one of the labels."""

    backend = "merge"

    def __init__(self, inputs, labels):
        if inputs.dim != labels.dim:
            raise DataError(f"the inputs' index has dimension {inputs.dim}, the labels' {labels.dim}", labels.source)
        self.inputs, self.labels = inputs, labels

    count = property(lambda self: self.inputs.count + self.labels.count)
    dim = property(lambda self: self.inputs.dim)

    @property
    def query_block(self) -> int:
        """Queries searched as one block (both parts' are powers of two): aligned blocks give one search's answers."""
        return max(self.inputs.query_block, self.labels.query_block)

    def __repr__(self) -> str:
        return f"JointSearch(inputs={self.inputs!r}, labels={self.labels!r})"

    def search_parts(self, queries: np.ndarray, k: int) -> tuple[Hits, Hits]:
        """The top-k of the inputs alone (kNN's) and of the labels alone (the dual encoder's), in their own ids."""
        queries = self.inputs.checked_queries(queries)
        return self.inputs.search(queries, k), self.labels.search(queries, k)

    def merge(self, inputs_hits: Hits, labels_hits: Hits, k: int) -> Hits:
        """The joint top-k from the two searches of `search_parts`."""
        return merge_top_k(inputs_hits, 0, labels_hits, self.inputs.count, k)

    def search(self, queries: np.ndarray, k: int) -> Hits:
        return self.merge(*self.search_parts(queries, k), k)


def prefix(hits: Hits, k: int) -> Hits:
    ids, sims = hits
    return ids[:, :k], sims[:, :k]


JOINT, SPLIT = RETRIEVALS = get_args(Retrieval)
DEFAULT_LABEL_SHARE = 0.5


def recorded_retrieval(mode: Any, share: Any, path: str | os.PathLike, fix: str = "") -> RaeRetrieval:
    """The retrieval a file the pipeline wrote records, or one DataError naming the file and key (and `fix`)."""
    mode, share = record_value(Retrieval, mode, path, "retrieval", fix), record_value(Share | None, share, path,
                                                                                      "label_share", fix)
    if (share is None) != (mode == JOINT):
        raise DataError(f"must be a number in [0, 1] for a split retrieval, null for a joint one, got {share!r}"
                        f"{fix and ': ' + fix}", path, "label_share")
    return RaeRetrieval(mode, share)


@dataclass(frozen=True)
class RaeRetrieval:
    """Which keys RAE scores: joint, the top-b of [X; Z]; split, the top-b_z label keys and the top-(b - b_z)
    input keys, b_z = label_share x b rounded half up, scored together (one softmax, one τ, p . V)."""

    mode: str = JOINT
    label_share: float | None = None  # split only

    def __post_init__(self) -> None:
        if self.mode not in RETRIEVALS or (self.mode == SPLIT) != (self.label_share is not None):
            raise ValueError(f"a split retrieval needs a label share, a joint one none: got {self}")

    def counts(self, b: int) -> tuple[int, int]:
        """(input keys, label keys) a split retrieval takes at b."""
        b = positive_int(b, "b")
        labels = math.floor(self.label_share * b + 0.5)
        return b - labels, labels

    def depth(self, b: int) -> int:
        """How many keys each key set's search must return for RAE at b (and every smaller b)."""
        return max(self.counts(b)) if self.mode == SPLIT else positive_int(b, "b")

    def hits(self, inputs: Hits, labels: Hits, num_inputs: int, b: int) -> Hits:
        """RAE's keys at b in joint ids, best first; joint merges as deep as the searches, so a prior may reorder."""
        if self.mode == JOINT:
            return merge_top_k(inputs, 0, labels, num_inputs, max(b, inputs[0].shape[1], labels[0].shape[1]))
        num_x, num_z = self.counts(b)
        return merge_top_k(prefix(inputs, num_x), 0, prefix(labels, num_z), num_inputs, b)


def rae_keys(retrieval: RaeRetrieval, inputs: Hits, labels: Hits, num_inputs: int, b: int,
             log_counts: np.ndarray | None, tau: float) -> Hits:
    """RAE's keys at b (`RaeRetrieval.hits`) with the prior τ·log n added (`log_counts`): the one home of it."""
    return add_log_prior(retrieval.hits(inputs, labels, num_inputs, b), log_counts, tau)
