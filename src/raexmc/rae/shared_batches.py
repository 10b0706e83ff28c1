"""Queries sent at once from several threads, answered in one `RaeModel.predict` call: one short query leaves a
CPU's kernels idle (16 clients: 74.8 requests/s against 35.8, bench/results/predict_latency_foldoc.json). No thread
or wait of its own: a caller takes the lock and answers every waiting request, its own among them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from .model import RaeModel

MAX_BATCH_QUERIES = 64  # queries in one call at most: requests beyond wait for the next call (a larger one goes alone)


@dataclass
class _Request:
    queries: list
    k: int
    answers: list | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


class SharedBatches:
    """`predict(queries, k)` as RaeModel.predict answers it (the answers only), for callers on any thread."""

    def __init__(self, model: RaeModel, max_queries: int = MAX_BATCH_QUERIES):
        self.model, self.max_queries = model, max_queries
        self._running = threading.Lock()  # held by the caller answering a batch
        self._waiting_lock = threading.Lock()
        self._waiting: list[_Request] = []

    def predict(self, queries: list, k: int) -> list[list[dict[str, Any]]]:
        request = _Request(list(queries), k)
        with self._waiting_lock:
            self._waiting.append(request)
        while not request.done.is_set():
            with self._running:
                if not request.done.is_set():
                    self._answer(self._next_batch())
        if request.error is not None:
            raise request.error
        return request.answers

    def _next_batch(self) -> list[_Request]:
        """The waiting requests, oldest first, up to max_queries queries (the first one whatever its size)."""
        with self._waiting_lock:
            taken, size = 0, 0
            while taken < len(self._waiting) and (taken == 0 or size + len(self._waiting[taken].queries)
                                                  <= self.max_queries):
                size += len(self._waiting[taken].queries)
                taken += 1
            batch, self._waiting = self._waiting[:taken], self._waiting[taken:]
        return batch

    def _answer(self, batch: list[_Request]) -> None:
        try:
            answers, _ = self.model.predict([query for request in batch for query in request.queries],
                                            max(request.k for request in batch))
        except BaseException as error:  # every request of the batch gets the error, on its own thread
            for request in batch:
                request.error = error
                request.done.set()
            return
        start = 0
        for request in batch:
            request.answers = [labels[:request.k] for labels in answers[start:start + len(request.queries)]]
            start += len(request.queries)
            request.done.set()
