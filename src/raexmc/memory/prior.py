"""A merged key's member count as a prior, p = softmax(q·k/τ + log n), so a key for n inputs gets their mass;
added at scoring time, not as an index coordinate, so one index serves every τ the tune stage tries.
"""

from __future__ import annotations

import numpy as np

from .search import Hits, sort_rows


def add_log_prior(hits: Hits, log_counts: np.ndarray | None, tau: float) -> Hits:
    """`hits` with τ·log n added to every input key's similarity, rows re-sorted."""
    if log_counts is None:
        return hits
    ids, sims = hits
    is_input = (ids >= 0) & (ids < len(log_counts))
    boost = np.zeros(sims.shape, dtype=np.float64)
    boost[is_input] = tau * np.asarray(log_counts, dtype=np.float64)[ids[is_input]]
    return sort_rows(ids, (sims.astype(np.float64) + boost).astype(sims.dtype))


def log_prior(prior: bool, counts: np.ndarray | None) -> np.ndarray | None:
    """The one rule for whether RAE adds the prior: log n where `memory.prior` is on and keys merged, else None."""
    if not prior or counts is None:
        return None
    return np.log(np.asarray(counts, dtype=np.float64))
