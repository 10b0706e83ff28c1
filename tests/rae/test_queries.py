"""Query text as `raexmc predict` and `raexmc serve` read it: what is refused, in one line naming the record."""

from __future__ import annotations

import pytest

from raexmc.data.dataset import Text
from raexmc.errors import DataError
from raexmc.rae.queries import checked_text, parse_queries

INVISIBLE = "empty query: no visible character (only control, format, space or combining characters)"


@pytest.mark.parametrize("text", ["\x00", "\x00\x00\x00", "\x07\x1b\x7f", "\u200b\u200c\u200d\ufeff", "\u3000\u200b",
                                  " \u0301", "\u00ad\u2060"])
def test_a_query_with_no_visible_character_is_refused_like_an_empty_one(text):
    """NUL, control, zero-width, separator and lone combining characters are what BERT's tokenizer drops: such
    a query reached the encoder as [CLS] [SEP] and was answered with the labels an empty query would get."""
    with pytest.raises(DataError) as refused:
        checked_text(text, "request", 3)
    assert refused.value.one_line() == f"DataError: request:3: {INVISIBLE}"


@pytest.mark.parametrize("text", ["perl", "\u0301e", "\x00perl", "\ue000", "日本語", "🙂", "\u200bx"])
def test_a_query_with_a_visible_character_is_kept_as_it_is(text):
    assert checked_text(text, "request", 3) == text


def test_query_parsing_and_errors():
    """A JSON line 2,000 levels deep made json.loads raise RecursionError: a 71-line traceback."""
    assert parse_queries(["perl\n", "\n", " awk  \n"], "q.txt", jsonl=False) == ["perl", "awk"]
    lines = ['{"text": "perl"}\n', '{"title": "gcc", "content": "compiler"}\n']
    assert parse_queries(lines, "q.jsonl", jsonl=True) == ["perl", Text(uid="2", title="gcc", content="compiler")]
    for lines, jsonl, line in [  # the whole line, or (ending in "(" or ": ") its start
            (["perl\n", "\x00\x00\n"], False, f"DataError: q.txt:2: {INVISIBLE}"),
            (['{"text": "perl"}\n', "[" * 2000 + "]" * 2000 + "\n"], True,
             'DataError: q.jsonl:2: JSON nested too deeply to read: a query is a record such as {"text": "..."}'),
            (['{"text": "ok"}', "{oops"], True, "DataError: q.jsonl:2: not valid JSON ("),
            (['{"id": 3}'], True, "DataError: q.jsonl:1: ")]:
        with pytest.raises(DataError) as bad:
            parse_queries(lines, "q.jsonl" if jsonl else "q.txt", jsonl=jsonl)
        got = bad.value.one_line()
        assert (got[:len(line)] if line.endswith(("(", ": ")) else got) == line, got
