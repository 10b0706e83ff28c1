"""WordNet 3.0 database files (wndb) as a linked corpus: a synset's title is its lemmas, content its gloss,
labels the synsets its semantic pointers lead to (`pointer_symbols` narrows them, e.g. "@" hypernyms).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from pathlib import Path

from ..errors import DataError
from .linked import LinkedEntry
from .textfile import read_lines

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
    """Parse data.{noun,verb,adj,adv}; uid "<pos><offset>"; `pointer_symbols` None: every semantic pointer."""
    dict_dir = Path(dict_dir)
    entries: list[LinkedEntry] = []
    raw_pointers: list[list[tuple[str, str, str, str]]] = []
    number_of: dict[str, int] = {}
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
