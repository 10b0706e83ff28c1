"""A corpus whose entries link to others as an XMC dataset: a seeded train/test split of its inputs, each labelled
by its links. Every entry is a label and one with links an input; the reciprocal-pair filter drops its own label."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .dataset import Example, Text, write_dataset


@dataclass
class LinkedEntry:
    uid: str
    title: str
    content: str
    links: list[int] = field(default_factory=list)


def seeded_split(count: int, seed: int, test_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Positions 0..count-1 shuffled by `seed` into sorted (train, test), round(count x test_fraction) tested."""
    order = np.random.default_rng(seed).permutation(count)
    n_test = int(round(count * test_fraction))
    return np.sort(order[n_test:]), np.sort(order[:n_test])


def write_split_corpus(target: str | os.PathLike, labels: Sequence[LinkedEntry], inputs: Sequence[LinkedEntry],
                       source: dict[str, Any], own_labels: Sequence[int] | None = None) -> dict[str, Any]:
    """Write `inputs` (their links index `labels`) split by the seed and test_fraction, `own_labels` filtered."""
    rows = dict(zip(("train", "test"), seeded_split(len(inputs), source["seed"], source["test_fraction"])))
    examples = {split: [Example(inputs[r].uid, inputs[r].title, inputs[r].content, labels=sorted(set(inputs[r].links)))
                        for r in picked] for split, picked in rows.items()}
    filters = {} if own_labels is None else {split: [(row, int(own_labels[r])) for row, r in enumerate(picked)]
                                             for split, picked in rows.items()}
    return write_dataset(target, [Text(e.uid, e.title, e.content) for e in labels], examples["train"],
                         examples["test"], filters, source)


def write_linked_corpus(target: str | os.PathLike, entries: Sequence[LinkedEntry],
                        source: dict[str, Any]) -> dict[str, Any]:
    """Every entry a label, each with links an input filtered from its own label."""
    own = [number for number, entry in enumerate(entries) if entry.links]
    return write_split_corpus(target, entries, [entries[number] for number in own], source, own)
