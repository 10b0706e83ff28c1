"""WordNet 3.0 database files (wndb) as a linked corpus: a synset's title is its lemmas, content its gloss, labels
the synsets its semantic pointers lead to (`pointer_symbols` narrows them); and the wordnet-hypernyms source, noun
synsets labelled by their hypernym ancestors within a band of depths (docs/pipeline.md#datasets). In the noun
hypernym DAG ("@", "@i") a synset may sit at several depths."""

from __future__ import annotations

import graphlib
import re
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError, DataError
from .catalogue import entry_file
from .layouts import read_lines
from .linked import LinkedEntry, write_split_corpus

DATA_FILES = {"n": "data.noun", "v": "data.verb", "a": "data.adj", "r": "data.adv"}
_FILE_OF_POS = {"n": "n", "v": "v", "a": "a", "s": "a", "r": "r"}
_ADJ_MARKER = re.compile(r"\((a|p|ip)\)$")


def _parse_synset(line: str) -> tuple[str, list[str], list[tuple[str, str, str, str]], str]:
    """One data-file line -> (offset, lemmas, pointers (symbol, offset, pos, src/tgt), gloss)."""
    head, _, gloss = line.partition(" | ")
    fields = head.split()
    offset, word_count = fields[0], int(fields[3], 16)
    words = [_ADJ_MARKER.sub("", fields[4 + 2 * i]).replace("_", " ") for i in range(word_count)]
    at = 4 + 2 * word_count
    pointer_count = int(fields[at])
    pointers = [tuple(fields[at + 1 + 4 * i: at + 5 + 4 * i]) for i in range(pointer_count)]
    if any(len(p) != 4 for p in pointers):
        raise ValueError("truncated pointer list")
    return offset, words, pointers, gloss.strip()


def read_wordnet(dict_dir: str | Path, pointer_symbols: Collection[str] | None = None) -> list[LinkedEntry]:
    """data.{noun,verb,adj,adv}; uid "<pos><offset>"; `pointer_symbols` None: every semantic pointer."""
    dict_dir = Path(dict_dir)
    entries, raw_pointers, number_of = [], [], {}
    for file_pos, name in DATA_FILES.items():
        path = dict_dir / name
        for line_no, line in read_lines(path):
            if line.startswith("  "):  # licence header
                continue
            try:
                offset, words, pointers, gloss = _parse_synset(line)
            except (ValueError, IndexError) as exc:
                raise DataError(f"malformed synset line ({exc})", path, line_no) from None
            uid = f"{file_pos}{offset}"
            number_of[uid] = len(entries)
            entries.append(LinkedEntry(uid=uid, title=", ".join(words), content=gloss))
            raw_pointers.append(pointers)

    for number, (entry, pointers) in enumerate(zip(entries, raw_pointers)):
        targets = set()
        for symbol, offset, pos, source_target in pointers:
            wanted = source_target == "0000" if pointer_symbols is None else symbol in pointer_symbols
            target = number_of.get(f"{_FILE_OF_POS.get(pos, pos)}{offset}")
            if wanted and target is not None and target != number:
                targets.add(target)
        entry.links = sorted(targets)
    return entries


HYPERNYM_POINTERS = frozenset({"@", "@i"})


def _topological_order(parents: dict[int, list[int]], entries: Sequence[LinkedEntry], origin: Path) -> list[int]:
    """Nodes with every parent before them; a cycle (not a DAG) is a DataError."""
    try:
        return list(graphlib.TopologicalSorter(parents).static_order())
    except graphlib.CycleError as exc:
        raise DataError(f"hypernym pointers form a cycle through synset {entries[exc.args[1][0]].uid}",
                        origin) from None


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
    """The corpus of `dict_dir` at the `source`'s depths, written split by its seed and test_fraction."""
    labels, inputs = read_hypernym_corpus(dict_dir, source["min_depth"], source["max_depth"])
    if not inputs:
        raise ConfigError(f"no noun synset has hypernym ancestors at depths {source['min_depth']}.."
                          f"{source['max_depth']}", entry_file(name), "min_depth")
    return write_split_corpus(target, labels, inputs, source)
