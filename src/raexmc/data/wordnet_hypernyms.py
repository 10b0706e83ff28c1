"""WordNet noun synsets labelled by their hypernym ancestors within a band of depths.

Few labels and many inputs (EURLex-4K's and AmazonCat-13K's regime), where a joint top-b holds few label keys.
In the noun hypernym DAG ("@", "@i") a synset may sit at several depths. Labels: the synsets at a depth in
[min_depth, max_depth] that are an ancestor of some synset; inputs: the synsets with such ancestors that are
no labels (so the filters stay empty), labelled by all of them. One depth gives about 1.25 labels an input;
a band nests labels as category trees do.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError, DataError
from .catalogue import entry_file
from .linked import LinkedEntry, write_split_corpus
from .wordnet import read_wordnet

HYPERNYM_POINTERS = frozenset({"@", "@i"})


def _topological_order(parents: dict[int, list[int]], entries: Sequence[LinkedEntry], origin: Path) -> list[int]:
    """Nodes with every parent before them; a cycle (not a DAG) is a DataError."""
    children: dict[int, list[int]] = {node: [] for node in parents}
    waiting = {node: len(ups) for node, ups in parents.items()}
    for node, ups in parents.items():
        for up in ups:
            children[up].append(node)
    order = [node for node, count in waiting.items() if count == 0]
    for node in order:  # grows while it is walked
        for child in children[node]:
            waiting[child] -= 1
            if waiting[child] == 0:
                order.append(child)
    if len(order) < len(parents):
        stuck = next(node for node, count in waiting.items() if count > 0)
        raise DataError(f"hypernym pointers form a cycle through synset {entries[stuck].uid}", origin)
    return order


def band_ancestors(parents: dict[int, list[int]], min_depth: int, max_depth: int,
                   order: list[int]) -> dict[int, frozenset[int]]:
    """Each node's proper ancestors at a depth in [min_depth, max_depth] on some path from a root
    (a node without parents, depth 0); `order` is topological."""
    depths: dict[int, frozenset[int]] = {}
    in_band: dict[int, frozenset[int]] = {}  # the node's band ancestors, plus itself where it sits in the band
    ancestors: dict[int, frozenset[int]] = {}
    for node in order:
        ups = parents[node]
        depths[node] = frozenset(d + 1 for up in ups for d in depths[up]) if ups else frozenset({0})
        ancestors[node] = frozenset().union(*(in_band[up] for up in ups))
        sits_in_band = any(min_depth <= d <= max_depth for d in depths[node])
        in_band[node] = ancestors[node] | {node} if sits_in_band else ancestors[node]
    return ancestors


def read_hypernym_corpus(dict_dir: str | Path, min_depth: int,
                         max_depth: int) -> tuple[list[LinkedEntry], list[LinkedEntry]]:
    """(labels, inputs) of the noun synsets in `dict_dir`, in data.noun order; `links` index `labels`."""
    entries = read_wordnet(dict_dir, HYPERNYM_POINTERS)
    nouns = {i for i, entry in enumerate(entries) if entry.uid.startswith("n")}
    parents = {i: [up for up in entries[i].links if up in nouns] for i in sorted(nouns)}
    order = _topological_order(parents, entries, Path(dict_dir) / "data.noun")
    ancestors = band_ancestors(parents, min_depth, max_depth, order)
    label_ids = sorted(frozenset().union(*ancestors.values()))
    position = {node: number for number, node in enumerate(label_ids)}
    labels = [entries[node] for node in label_ids]
    inputs = [LinkedEntry(entries[node].uid, entries[node].title, entries[node].content,
                          sorted(position[up] for up in ancestors[node]))
              for node in sorted(parents) if ancestors[node] and node not in position]
    return labels, inputs


def write_hypernym_dataset(dict_dir: str | Path, target: str | Path, name: str,
                           source: dict[str, Any]) -> dict[str, Any]:
    """Build the corpus from `dict_dir` at the `source`'s checked min_depth and max_depth and write it split by its
    seed and test_fraction."""
    labels, inputs = read_hypernym_corpus(dict_dir, source["min_depth"], source["max_depth"])
    if not inputs:
        raise ConfigError(f"no noun synset has hypernym ancestors at depths {source['min_depth']}.."
                          f"{source['max_depth']}", entry_file(name), "min_depth")
    return write_split_corpus(target, labels, inputs, source)
