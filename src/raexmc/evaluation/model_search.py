"""The evaluate stage's search: RAE's keys from the packaged model's own indexes, taken as `raexmc predict` takes
them (RaeModel.keys, at each b its own retrieval depth), and the baselines' from the model's indexes where they
hold every training input and label text, else from the index stage's; with the time spent searching."""

from __future__ import annotations

import time

import numpy as np

from ..memory.merge import JointSearch, prefix
from ..rae.model import RaeModel
from .retrievals import BlockSearch, Retrievals


class ModelSearch:
    """A Search (retrievals.Search) of `queries` for RAE at its b and at every b of `b_sweep`, and for the baselines
    `baseline_depth` deep (methods.baseline_depth) in `baselines`; `seconds` the time it took."""

    def __init__(self, model: RaeModel, baselines: JointSearch, queries: np.ndarray, b_sweep: list[int],
                 baseline_depth: int):
        self.model, self.baselines, self.queries = model, baselines, queries
        retrieval, b = model.settings.retrieval, model.settings.b
        self.swept_b = tuple(sorted({swept for swept in b_sweep if swept != b}))
        self.depths = {swept: retrieval.depth(swept) for swept in (b, *self.swept_b)}
        self.depth, self.baseline_depth = max(self.depths.values()), baseline_depth
        self.seconds = 0.0

    def __call__(self, rows: slice) -> Retrievals:
        started = time.perf_counter()
        queries, own = self.queries[rows], self.model.search
        shared = own is self.baselines
        inputs, labels = own.search_parts(queries, max(self.depth, self.baseline_depth) if shared else self.depth)
        base_inputs, base_labels = ((inputs, labels) if shared
                                    else self.baselines.search_parts(queries, self.baseline_depth))

        def keys_at(b: int) -> tuple[np.ndarray, np.ndarray]:
            depth = self.depths[b]  # the model's own retrieval at b: what it answers a query with
            return self.model.at(b=b).keys(prefix(inputs, depth), prefix(labels, depth))

        found = Retrievals(joint=keys_at(self.model.settings.b), labels=prefix(base_labels, self.baseline_depth),
                           inputs=prefix(base_inputs, self.baseline_depth),
                           other_b={b: keys_at(b) for b in self.swept_b})
        self.seconds += time.perf_counter() - started
        return found

    def in_blocks(self) -> BlockSearch:
        """This search a block of the indexes' query_block rows at a time: the answers of one whole search."""
        block = max(self.model.search.query_block, self.baselines.query_block)
        return BlockSearch(self, block, len(self.queries))

    def queries_per_s(self) -> float:
        return round(len(self.queries) / max(self.seconds, 1e-9), 1)
