"""What the evaluation's searches found for the test queries (RAE's keys, the labels alone, the inputs alone), and
a search that answers chunks of queries of any size as one search over all of them would."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..memory.search import Hits


@dataclass
class Retrievals:
    """Every query's top keys from the three searches; RAE at a smaller b scores the first b of `joint` unless
    `other_b` holds that b's own keys (a split retrieval's)."""

    joint: Hits
    labels: Hits
    inputs: Hits
    other_b: dict[int, Hits] = field(default_factory=dict)

    def rows(self, rows: slice) -> Retrievals:
        return Retrievals(*((ids[rows], sims[rows]) for ids, sims in (self.joint, self.labels, self.inputs)),
                          other_b={b: (ids[rows], sims[rows]) for b, (ids, sims) in self.other_b.items()})

    def rae_at(self, b: int) -> Hits:
        return self.other_b.get(b, self.joint)


def concatenated(pieces: list[Retrievals]) -> Retrievals:
    def stacked(hits: list[Hits]) -> Hits:
        return tuple(np.concatenate(arrays) for arrays in zip(*hits))

    return Retrievals(*(stacked([getattr(piece, name) for piece in pieces]) for name in ("joint", "labels", "inputs")),
                      other_b={b: stacked([piece.other_b[b] for piece in pieces]) for b in pieces[0].other_b})


Search = Callable[[slice], Retrievals]  # the retrievals of a chunk of the test queries


class BlockSearch:
    """A Search for consecutive chunks answered from searches of whole aligned blocks of `block` queries, one kept
    at a time: a search's answer can depend on its call's other queries (BLAS rounding, hnswlib's retries)."""

    def __init__(self, search: Search, block: int, num_queries: int):
        self.search, self.block, self.num_queries = search, block, num_queries
        self.start, self.found = -1, None

    def _block(self, start: int) -> Retrievals:
        if start != self.start:
            self.start, self.found = start, None  # drop the previous block before searching the next
            self.found = self.search(slice(start, min(start + self.block, self.num_queries)))
        return self.found

    def __call__(self, rows: slice) -> Retrievals:
        first = rows.start - rows.start % self.block
        pieces = [self._block(start).rows(slice(max(rows.start, start) - start, min(rows.stop - start, self.block)))
                  for start in range(first, max(rows.stop, first + 1), self.block)]
        return pieces[0] if len(pieces) == 1 else concatenated(pieces)
