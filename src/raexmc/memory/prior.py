"""A merged key's member count as a prior: log n added to its logit, so that in p = softmax(q·k/τ + log n)
a key standing for n near-identical inputs gets the softmax mass those n inputs had together.

The prior is applied to the retrieved keys, at scoring time, rather than baked into the index with an
extra coordinate (q' = [q, 1], k' = [k, τ·log n]): that trick fixes τ when the index is built, while the
tune stage chooses τ after it, from a grid, and evaluate and predict use its choice. Here one index
serves every τ; which keys are retrieved is decided by similarity alone, their weights by the prior.
"""

from __future__ import annotations

import numpy as np

from .search import Hits, sort_rows


def add_log_prior(hits: Hits, log_counts: np.ndarray | None, tau: float) -> Hits:
    """The joint retrieval with τ·log n added to the similarity of every input key (joint ids below
    len(log_counts)), so that sims/τ gains log n; rows re-sorted, label keys and padding unchanged.
    `log_counts` None (a memory without the prior): `hits` as they are."""
    if log_counts is None:
        return hits
    ids, sims = hits
    is_input = (ids >= 0) & (ids < len(log_counts))
    boost = np.zeros(sims.shape, dtype=np.float64)
    boost[is_input] = tau * np.asarray(log_counts, dtype=np.float64)[ids[is_input]]
    return sort_rows(ids, (sims.astype(np.float64) + boost).astype(sims.dtype))


def log_prior(prior: bool, counts: np.ndarray | None) -> np.ndarray | None:
    """The one rule for whether RAE adds the prior: log n of every input key where `memory.prior` is on and
    the memory merged its keys (`counts`, its member counts); None otherwise, a full memory's n being all 1."""
    if not prior or counts is None:
        return None
    return np.log(np.asarray(counts, dtype=np.float64))
