"""FOLDOC (the Free On-line Dictionary of Computing) in dictd format as a linked corpus: an entry's labels are the
entries its `{...}` cross-references resolve to (by headword or alias, any case), less self-links and dangling ones."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

from ..errors import DataError
from .layouts import read_lines, require_file
from .linked import LinkedEntry

_B64 = {c: i for i, c in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")}
_LINK = re.compile(r"\{([^{}]*)\}")
_URL_SUFFIX = re.compile(r"\s*\(([^()]*)\)\s*$")
_CATEGORY = re.compile(r"<[^<>\n]*>")
_DATE_LINE = re.compile(r"^\s*\(\d{4}-\d{2}-\d{2}\)\s*$", re.MULTILINE)
_SPACE = re.compile(r"\s+")


def _b64_number(text: str) -> int:
    value = 0
    for char in text:
        value = value * 64 + _B64[char]
    return value


def _key(text: str) -> str:
    return _SPACE.sub(" ", text).strip().lower()


def _link_text(raw: str) -> str | None:
    """The entry name a cross-reference points to, or None for an external link `{text (url)}`."""
    match = _URL_SUFFIX.search(raw)
    if match and ("/" in match.group(1) or "." in match.group(1)):
        return None
    return _key(raw)


def _plain_text(body: str) -> str:
    """A definition without dictd markup: link braces, category tags and the date line go."""
    body = _CATEGORY.sub(" ", _LINK.sub(lambda m: _URL_SUFFIX.sub("", m.group(1)), _DATE_LINE.sub(" ", body)))
    return _SPACE.sub(" ", body).strip()


def _read_index(index_path: Path) -> dict[tuple[int, int], list[str]]:
    """(offset, length) of each entry -> its headwords, in index order."""
    entries: dict[tuple[int, int], list[str]] = {}
    for line_no, line in read_lines(index_path):
        parts = line.split("\t")
        if len(parts) != 3 or not all(c in _B64 for c in parts[1] + parts[2]):
            raise DataError("expected 'headword<TAB>offset<TAB>length' (dictd base64)", index_path, line_no)
        headword, offset, length = parts
        if headword.startswith("00-database") or headword.startswith("00database"):
            continue
        entries.setdefault((_b64_number(offset), _b64_number(length)), []).append(headword)
    return entries


def read_foldoc(index_path: str | Path, dict_path: str | Path) -> list[LinkedEntry]:
    """foldoc.index + foldoc.dict.dz as linked entries (uid: the entry's first headword)."""
    index_path, dict_path = require_file(index_path), require_file(dict_path)
    try:
        with gzip.open(dict_path, "rb") as handle:
            blob = handle.read()
    except (gzip.BadGzipFile, EOFError, OSError) as exc:
        raise DataError(f"corrupt dictzip data ({exc})", dict_path) from None

    located = sorted(_read_index(index_path).items())
    entries, bodies, by_name = [], [], {}
    for number, ((offset, length), headwords) in enumerate(located):
        if offset + length > len(blob):
            raise DataError(f"entry '{headwords[0]}' points past the end of the dictionary", index_path, headwords[0])
        try:
            text = blob[offset:offset + length].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(f"invalid UTF-8 at byte {offset + exc.start}", dict_path, headwords[0]) from None
        header, _, body = text.strip("\n").partition("\n\n")
        names = [line.strip() for line in header.splitlines() if line.strip()]
        title = names[0] if names else headwords[0]
        for name in headwords + [n for alias in names for n in alias.split("%%%")]:
            by_name.setdefault(_key(name), number)
        entries.append(LinkedEntry(uid=headwords[0], title=title, content=_plain_text(body)))
        bodies.append(body)

    for number, (entry, body) in enumerate(zip(entries, bodies)):
        targets = {by_name.get(_link_text(raw) or "") for raw in _LINK.findall(body)}
        entry.links = sorted(t for t in targets if t is not None and t != number)
    return entries
