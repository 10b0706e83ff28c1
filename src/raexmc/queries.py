"""Query texts for `raexmc predict`: plain lines, or JSON lines with "text" (or "title" and
"content", joined as the token cache joins them). Blank lines are skipped."""

from __future__ import annotations

import json
from collections.abc import Iterable

from .errors import DataError


def _text_of(record: object, source: str, line_no: int) -> str:
    if isinstance(record, dict):
        if isinstance(record.get("text"), str):
            return record["text"]
        if isinstance(record.get("title"), str):
            return f"{record['title']} {record.get('content') or ''}".strip()
    raise DataError('a JSON query needs a "text" (or "title") string', source, line_no)


def parse_queries(lines: Iterable[str], source: str, jsonl: bool) -> list[str]:
    """The query texts in `lines` (from `source`, named in errors with the line number)."""
    texts = []
    for line_no, line in enumerate(lines, start=1):
        line = line.strip()
        if not line:
            continue
        if not jsonl:
            texts.append(line)
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"not valid JSON ({exc.msg})", source, line_no) from None
        texts.append(_text_of(record, source, line_no))
    return texts
