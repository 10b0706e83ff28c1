"""Queries for the predictor: a plain text, or a record with "text" (or "title" and "content", which
the predictor joins by the training inputs' recipe), from `raexmc predict`'s lines or a served request."""

from __future__ import annotations

import json
import numbers
import unicodedata
from collections.abc import Iterable, Iterator

from ..data.dataset import Text
from ..errors import ConfigError, DataError

# Unicode categories of characters that show nothing and that BERT's tokenizer drops: controls (NUL among them),
# format characters (zero-width spaces and joiners, the BOM, soft hyphens), separators, and combining marks, which
# show only on a base character.
INVISIBLE = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp", "Mn", "Me"})
DEEP_JSON = "JSON nested too deeply to read"  # json.loads past the interpreter's recursion limit


def checked_text(text: str, source: str, number: int) -> str:
    """`text`, or DataError if it is blank, shows no character or holds a lone surrogate (not UTF-8)."""
    if not text.strip():
        raise DataError("empty query", source, number)
    if all(unicodedata.category(char) in INVISIBLE for char in text):
        raise DataError("empty query: no visible character (only control, format, space or combining characters)",
                        source, number)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise DataError(f"not UTF-8 text (character {exc.start + 1})", source, number) from None
    return text


def checked_k(k: object, num_labels: int) -> int:
    """`k` as an int in [1, num_labels]: top-k allocates k slots a query, so a huge k could take a server."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise ConfigError(f"k must be an integer >= 1, got {k!r}")
    if k > num_labels:
        raise ConfigError(f"k must be at most {num_labels} (the number of labels), got {k}")
    return int(k)


def utf8_lines(lines: Iterable[bytes], source: str) -> Iterator[str]:
    """`lines` decoded as UTF-8; a line that is not is a DataError naming `source` and its line number."""
    for line_no, line in enumerate(lines, start=1):
        try:
            yield line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(f"not UTF-8 text (byte {line[exc.start]:#04x} at column {exc.start + 1})", source,
                            line_no) from None


def query_of(record: object, source: str, number: int) -> Text | str:
    """Record `number` of `source` as a query: its "text", else its "title" and "content" as a record."""
    if isinstance(record, dict):
        if isinstance(record.get("text"), str):
            return checked_text(record["text"], source, number)
        if isinstance(record.get("title"), str):
            return Text(uid=str(number), title=checked_text(record["title"], source, number),
                        content=str(record.get("content") or ""))
    raise DataError('a query needs a "text" (or "title") string', source, number)


def parse_queries(lines: Iterable[str], source: str, jsonl: bool) -> list[Text | str]:
    """The queries in `lines`: plain lines, or JSON lines (`jsonl`) read by `query_of`; blank lines skipped."""
    queries: list[Text | str] = []
    for line_no, line in enumerate(lines, start=1):
        line = line.strip()
        if not line:
            continue
        if not jsonl:
            queries.append(checked_text(line, source, line_no))
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"not valid JSON ({exc.msg})", source, line_no) from None
        except RecursionError:
            raise DataError(f'{DEEP_JSON}: a query is a record such as {{"text": "..."}}', source, line_no) from None
        queries.append(query_of(record, source, line_no))
    return queries
