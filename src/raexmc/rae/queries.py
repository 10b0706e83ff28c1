"""Queries for the predictor: a plain text, or a record with "text" (or "title" and "content", which
the predictor joins by the training inputs' recipe), from `raexmc predict`'s lines or a served request."""

from __future__ import annotations

import json
from collections.abc import Iterable

from ..data.dataset import Text
from ..errors import DataError


def query_of(record: object, source: str, number: int) -> Text | str:
    """A record (number `number` of `source`, named in errors) as a query: its "text", else its
    "title" and "content" as a record."""
    if isinstance(record, dict):
        if isinstance(record.get("text"), str):
            return record["text"]
        if isinstance(record.get("title"), str):
            return Text(uid=str(number), title=record["title"], content=str(record.get("content") or ""))
    raise DataError('a query needs a "text" (or "title") string', source, number)


def parse_queries(lines: Iterable[str], source: str, jsonl: bool) -> list[Text | str]:
    """The queries in `lines` (from `source`, named in errors with the line number): plain lines, or
    JSON lines (`jsonl`) read by `query_of`. Blank lines are skipped."""
    queries: list[Text | str] = []
    for line_no, line in enumerate(lines, start=1):
        line = line.strip()
        if not line:
            continue
        if not jsonl:
            queries.append(line)
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"not valid JSON ({exc.msg})", source, line_no) from None
        queries.append(query_of(record, source, line_no))
    return queries
