"""The evaluate stage's search: RAE's keys from its memory and the baselines' from the index stage's indexes, for
consecutive rows of the test queries, with the time spent searching (the stage logs the queries/s)."""

from __future__ import annotations

import time

import numpy as np

from ..memory.input_memory import InputMemory
from ..memory.merge import SPLIT, JointSearch, RaeRetrieval
from .methods import EvalSettings
from .retrievals import BlockSearch, Retrievals


class MemorySearch:
    """A Search (evaluator.Search) of `queries`: RAE's keys to the depth of the largest b evaluated, the baselines'
    to their own `baseline_depth` (methods.baseline_depth); `seconds` the time it took."""

    def __init__(self, memory: InputMemory, baselines: JointSearch, queries: np.ndarray, settings: EvalSettings,
                 retrieval: RaeRetrieval, ef_search: int, baseline_depth: int, device: str = "cpu"):
        self.memory, self.baselines, self.queries = memory, baselines, queries
        self.settings, self.retrieval, self.ef_search, self.device = settings, retrieval, ef_search, device
        self.depth, self.baseline_depth = max([settings.b, *settings.b_sweep]), baseline_depth
        # a joint retrieval's smaller b are prefixes of its keys at b; a split one takes each b's own share
        self.swept_b = (tuple(b for b in settings.b_sweep if b != settings.b) if retrieval.mode == SPLIT else ())
        self.seconds = 0.0

    def __call__(self, rows: slice) -> Retrievals:
        started = time.perf_counter()
        joint, other_b, inputs, labels = self.memory.search(
            self.baselines, self.queries[rows], self.depth, self.settings.b, self.settings.tau, self.ef_search,
            retrieval=self.retrieval, other_b=self.swept_b, device=self.device, baseline_k=self.baseline_depth)
        self.seconds += time.perf_counter() - started
        return Retrievals(joint=joint, labels=labels, inputs=inputs, other_b=other_b)

    def in_blocks(self) -> BlockSearch:
        """This search a block of the baselines' query_block rows at a time: the answers of one whole search."""
        return BlockSearch(self, self.baselines.query_block, len(self.queries))

    def queries_per_s(self) -> float:
        return round(len(self.queries) / max(self.seconds, 1e-9), 1)
