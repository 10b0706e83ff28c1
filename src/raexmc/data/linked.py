"""A corpus whose entries link to others as an XMC dataset: every entry is a label, and one with links an
input whose labels are its links' targets; since an input is its own label, the reciprocal-pair filter drops it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .dataset import Example, Text


@dataclass
class LinkedEntry:
    uid: str
    title: str
    content: str
    links: list[int] = field(default_factory=list)


@dataclass
class SplitCorpus:
    labels: list[Text]
    train: list[Example]
    test: list[Example]
    filters: dict[str, list[tuple[int, int]]]


def seeded_split(count: int, seed: int, test_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Positions 0..count-1 shuffled by `seed` into sorted (train, test), round(count x test_fraction) tested."""
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    order = np.random.default_rng(seed).permutation(count)
    n_test = int(round(count * test_fraction))
    return np.sort(order[n_test:]), np.sort(order[:n_test])


def split_linked_corpus(entries: Sequence[LinkedEntry], seed: int, test_fraction: float) -> SplitCorpus:
    """Seeded train/test split of the entries that have links; all entries are labels."""
    inputs = np.array([i for i, entry in enumerate(entries) if entry.links], dtype=np.int64)
    train_rows, test_rows = seeded_split(len(inputs), seed, test_fraction)
    train_ids, test_ids = inputs[train_rows], inputs[test_rows]

    def examples(ids: np.ndarray) -> list[Example]:
        return [Example(entries[i].uid, entries[i].title, entries[i].content, labels=sorted(set(entries[i].links)))
                for i in ids]

    return SplitCorpus(
        labels=[Text(e.uid, e.title, e.content) for e in entries],
        train=examples(train_ids),
        test=examples(test_ids),
        filters={"train": [(row, int(i)) for row, i in enumerate(train_ids)],
                 "test": [(row, int(i)) for row, i in enumerate(test_ids)]},
    )
