"""How much of the exact search an approximate one finds: recall@k by key id (HNSW against exact)."""

from __future__ import annotations

import numpy as np

from ..errors import DataError


def recall_at_k(approx_ids: np.ndarray, exact_ids: np.ndarray) -> float:
    """Mean over queries of the share of exact top-k ids that the approximate search also found.

    -1 padding is ignored on both sides; queries without any exact id do not count (1.0 when
    no query has one).
    """
    approx_ids = np.asarray(approx_ids, dtype=np.int64)
    exact_ids = np.asarray(exact_ids, dtype=np.int64)
    if approx_ids.ndim != 2 or exact_ids.ndim != 2 or approx_ids.shape[0] != exact_ids.shape[0]:
        raise DataError(f"id matrices must be 2-D with the same rows, got {approx_ids.shape} and {exact_ids.shape}")
    valid = exact_ids >= 0
    wanted = valid.sum(axis=1)
    if not wanted.any():
        return 1.0
    # Tag each id with its row so one set test covers all queries.
    span = int(max(exact_ids.max(initial=-1), approx_ids.max(initial=-1))) + 2
    rows = np.arange(exact_ids.shape[0], dtype=np.int64)[:, None] * span
    approx_tags = (rows + approx_ids)[approx_ids >= 0]
    hits = valid & np.isin(rows + exact_ids, approx_tags)
    counted = wanted > 0
    return float(np.mean(hits.sum(axis=1)[counted] / wanted[counted]))
