"""One ranking's metrics gathered over chunks of test queries, the same however they are chunked: a mean is a running
sum in query order over the count; PSP@k and PSnDCG@k the ratio of two such means; macro-F1 per-label counts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from .metrics import f1_counts, macro_f1_from_counts, over_mean_ideal, per_query_values, percent

F1_K = 5
# Every query's metric values are kept in float32: they lie in [0, 1] (PSP's over a mean ideal, near it), so 7
# significant digits serve the paired t-tests, and at 970K test queries x 4 methods x 14 metrics float64 would
# hold 0.43 GB. The means are summed from each chunk's float64 values, never from these.
PER_QUERY_DTYPE = np.float32


@dataclass
class QueryChunk:
    """Some consecutive test queries: their rows in the test set, truth (without filtered pairs), filtered
    pairs, and the PSP@k and PSnDCG@k denominators of their ideal rankings (metrics.propensity_ideals)."""

    rows: slice
    truth: sp.csr_matrix
    exclude: sp.csr_matrix
    ideals: dict[str, np.ndarray]


def running_sum(total: float, values: np.ndarray) -> float:
    """total + values[0] + values[1] + ..., added one at a time in order: any split of the values into
    consecutive chunks gives the same float."""
    return float(np.add.accumulate(np.concatenate(([total], values)))[-1])


class RankingTotals:
    """Sums of one ranking's per-query metrics over the chunks added so far; with `per_instance`, also every
    query's values (kept in (num_queries,) arrays) and the macro-F1@5 counts."""

    def __init__(self, num_queries: int, propensity: np.ndarray, per_instance: bool = False):
        self.num_queries, self.propensity = num_queries, propensity
        self.count, self.sums, self.ideal_sums = 0, {}, {}
        self.values: dict[str, np.ndarray] | None = {} if per_instance else None
        self.tp = self.predicted = None

    def add(self, chunk: QueryChunk, ranked: np.ndarray) -> None:
        """Add the ranking (top labels, -1 padded) of the chunk's queries."""
        values = per_query_values(ranked, chunk.truth, propensity=self.propensity)
        for sums, new in ((self.sums, values), (self.ideal_sums, chunk.ideals)):
            for name, array in new.items():
                sums[name] = running_sum(sums.get(name, 0.0), array)
        self.count += len(ranked)
        if self.values is None:
            return
        for name, array in values.items():
            self.values.setdefault(name, np.empty(self.num_queries, PER_QUERY_DTYPE))[chunk.rows] = array
        tp, predicted = f1_counts(ranked, chunk.truth, F1_K)
        self.tp, self.predicted = (tp, predicted) if self.tp is None else (self.tp + tp, self.predicted + predicted)

    @classmethod
    def pooled(cls, parts: list[RankingTotals]) -> RankingTotals:
        """The totals of several sets of queries, each scored with its own propensities, as of one set: its means
        are over all their queries (PSP@k the ratio of the pooled numerator's and ideal's means). Sums only: no
        per-query values or macro-F1 counts."""
        pooled = cls(sum(part.num_queries for part in parts), np.empty(0))
        pooled.count = sum(part.count for part in parts)
        for name in ("sums", "ideal_sums"):
            setattr(pooled, name, {key: sum(getattr(part, name)[key] for part in parts)
                                   for key in getattr(parts[0], name)})
        return pooled

    def result(self, relevant: np.ndarray, train_freq: np.ndarray) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """The summary (percent; macro-F1@5 per segment given every test label's count of positives `relevant`)
        and the per-query arrays (empty without `per_instance`), once every query was added."""
        if self.count != self.num_queries:
            raise ValueError(f"{self.count} of {self.num_queries} queries were added")
        n = max(self.count, 1)
        means = {name: total / n for name, total in self.sums.items()}
        per_instance = self.values or {}
        for name, ideal_total in self.ideal_sums.items():
            mean_ideal = ideal_total / n
            means[name] = means[name] / mean_ideal if mean_ideal > 0 else 0.0
            if name in per_instance:
                per_instance[name] = over_mean_ideal(per_instance[name], mean_ideal)
        summary: dict[str, Any] = {name: percent(mean) if self.count else float("nan") for name, mean in means.items()}
        if self.tp is not None:
            f1 = macro_f1_from_counts(self.tp, self.predicted, relevant, train_freq)
            summary[f"macro-F1@{F1_K}"] = {k: (round(100 * v, 2) if np.isfinite(v) else None) for k, v in f1.items()}
        return summary, per_instance
