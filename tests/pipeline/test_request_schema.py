"""The request schema of `raexmc serve` on its own (tests/rae/test_predictor.py asks a real server)."""

from __future__ import annotations

import json

import pytest

from raexmc.errors import ConfigError, DataError
from raexmc.pipeline.server import checked_request

RECORDS = {"dataframe_records": [{"text": "perl"}]}


def checked(request: dict) -> dict:
    return json.loads(checked_request(json.dumps(request).encode()))


def test_top_k_is_passed_on_as_k_inputs_as_records_and_the_rest_and_bodies_not_json_objects_unchanged():
    assert checked({**RECORDS, "params": {"top_k": 2}}) == {**RECORDS, "params": {"k": 2}}
    assert checked({**RECORDS, "params": {"k": 2}}) == {**RECORDS, "params": {"k": 2}}
    assert checked({"inputs": {"text": ["perl"]}}) == {"inputs": {"text": ["perl"]}}
    assert checked({**RECORDS, "params": None}) == {**RECORDS, "params": None}
    for body in (b"{not json", b"[1, 2]", b"\xff"):  # not a JSON object: left to the scoring server
        assert checked_request(body) == body
    # a text, no texts and records under inputs are passed on as records
    for inputs, records in (("perl", [{"text": "perl"}]), ([], []),
                            ([{"title": "a", "content": "b"}], [{"title": "a", "content": "b"}])):
        assert checked({"inputs": inputs, "params": {"k": 2}}) == {"params": {"k": 2}, "dataframe_records": records}


@pytest.mark.parametrize(("request_", "error", "line"), [
    ({**RECORDS, "top_k": 2}, DataError, 'DataError: request: unknown field "top_k" (accepted: dataframe_records, '
                                         'dataframe_split, inputs, instances, params)'),
    ({**RECORDS, "params": {"K": 2}}, ConfigError,
     'ConfigError: request: unknown params key "K" (accepted: k or its alias top_k)'),
    ({**RECORDS, "params": {"top_k": 2.5}}, ConfigError,
     "ConfigError: request: params.top_k: Input should be a valid integer"),
    ({"dataframe_records": "perl"}, DataError, "DataError: request: dataframe_records: Input should be a JSON array"),
    # 2,000 levels (8 KB) made json.loads raise RecursionError, which the server answered with a 500
    (b'{"inputs": ' + b"[" * 2000 + b"]" * 2000 + b"}", DataError,
     "DataError: request: JSON nested too deeply to read: send the queries as records of strings")])
def test_refusals_name_what_is_wrong_in_one_line(request_, error, line):
    with pytest.raises(error) as refused:
        checked_request(request_ if isinstance(request_, bytes) else json.dumps(request_).encode())
    assert refused.value.one_line() == line
