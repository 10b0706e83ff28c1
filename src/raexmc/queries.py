"""Queries for `raexmc predict`: plain lines, or JSON lines with "text" (or "title" and "content",
which the predictor joins by the training inputs' recipe). Blank lines are skipped."""

from __future__ import annotations

import json
from collections.abc import Iterable

from .data.dataset import Text
from .errors import DataError


def _query_of(record: object, source: str, line_no: int) -> Text | str:
    if isinstance(record, dict):
        if isinstance(record.get("text"), str):
            return record["text"]
        if isinstance(record.get("title"), str):
            return Text(uid=str(line_no), title=record["title"], content=str(record.get("content") or ""))
    raise DataError('a JSON query needs a "text" (or "title") string', source, line_no)


def parse_queries(lines: Iterable[str], source: str, jsonl: bool) -> list[Text | str]:
    """The queries in `lines` (from `source`, named in errors with the line number): plain texts, or
    records whose title and content the predictor turns into text as training did."""
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
        queries.append(_query_of(record, source, line_no))
    return queries
