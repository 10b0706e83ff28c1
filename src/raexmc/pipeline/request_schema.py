"""The request `raexmc serve` accepts, declared once: MLflow's scoring server drops unknown fields and
params keys (a misspelt `"params": {"topk": 2}` got the default k); here an unknown name is refused in one line.

Checked: field names, the params' types and the shape of "inputs" (a text or a list of texts reads as {"text":
...} records). Left to the model, which `raexmc predict` shares: the records' content (`query_of`) and k's range
(`checked_k`).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, StrictInt, ValidationError
from pydantic.fields import FieldInfo

from ..errors import ConfigError, DataError, RaexmcError
from ..rae.queries import DEEP_JSON

SOURCE = "request"  # what errors name in place of a file
INPUT_FORMS = '"text", ["text", ...], records [{"text": ...}] or columns {"text": [...]}'
JSON_TERMS = {"model_type": "Input should be a JSON object", "dict_type": "Input should be a JSON object",
              "list_type": "Input should be a JSON array"}  # pydantic's messages name Python types and classes


class QueryParams(BaseModel):
    """The request's "params": k, the labels per query (top_k, as many serving APIs call it, reads as k)."""

    model_config = ConfigDict(extra="forbid")
    k: StrictInt | None = Field(None, validation_alias=AliasChoices("k", "top_k"))


class PredictRequest(BaseModel):
    """A JSON request to /invocations: MLflow's input fields (one of them holds the queries) and params."""

    model_config = ConfigDict(extra="forbid")
    dataframe_records: list[dict[str, Any]] | None = None
    dataframe_split: dict[str, Any] | None = None
    inputs: Any = None
    instances: Any = None
    params: QueryParams | None = None


def checked_request(body: bytes) -> bytes:
    """`body` with its params under their own names (top_k as k), or the error that refuses it; a body that is
    no JSON object passes on as it is, JSON nested past the recursion limit is refused (it would be a 500)."""
    try:
        return _checked(body)
    except RecursionError:
        raise DataError(f"{DEEP_JSON}: send the queries as records of strings", SOURCE) from None


def _checked(body: bytes) -> bytes:
    try:
        raw = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return body
    if not isinstance(raw, dict):
        return body
    try:
        request = PredictRequest.model_validate(raw)
    except ValidationError as invalid:
        raise refusal(invalid.errors()[0]) from None
    if request.params is not None:
        raw["params"] = request.params.model_dump(exclude_none=True)
    if texts_as_records(request.inputs) and len(request.model_fields_set - {"params"}) == 1:
        inputs = raw.pop("inputs")
        raw["dataframe_records"] = [item if isinstance(item, dict) else {"text": item}
                                    for item in ([inputs] if isinstance(inputs, str) else inputs)]
    return json.dumps(raw).encode()


def texts_as_records(inputs: Any) -> bool:
    """Whether "inputs" reads as records: a text or a list of texts one {"text": ...} each, a list of records as
    they are; columns pass on as MLflow reads them; anything else is refused naming where."""
    if inputs is None or isinstance(inputs, dict):
        return False
    if isinstance(inputs, str):
        return True
    if not isinstance(inputs, list):
        raise DataError(f"inputs: give texts {INPUT_FORMS}", SOURCE)
    kind = dict if inputs and isinstance(inputs[0], dict) else str
    for number, item in enumerate(inputs):
        if not isinstance(item, kind):
            raise DataError(f"inputs[{number}]: not a {'record' if kind is dict else 'text'}: give texts "
                            f"{INPUT_FORMS}, one kind in a list", SOURCE)
    return True


def refusal(error: dict[str, Any]) -> RaexmcError:
    """One line for pydantic's first error: an unknown name with the names accepted, else where and why."""
    *parents, name = error["loc"]
    in_params = parents[:1] == ["params"] or (not parents and name == "params")
    kind = ConfigError if in_params else DataError
    if error["type"] != "extra_forbidden":
        return kind(f"{'.'.join(map(str, error['loc']))}: {JSON_TERMS.get(error['type'], error['msg'])}", SOURCE)
    if not in_params:
        return kind(f'unknown field "{name}" (accepted: {accepted(PredictRequest)})', SOURCE)
    if name in spellings(QueryParams.model_fields["k"]):
        return kind('params give k twice, as "k" and "top_k": give one', SOURCE)
    return kind(f'unknown params key "{name}" (accepted: {accepted(QueryParams)})', SOURCE)


def accepted(model: type[BaseModel]) -> str:
    """The names `model` reads, each with its other spellings: "k or its alias top_k"."""
    return ", ".join(name + "".join(f" or its alias {alias}" for alias in spellings(field) if alias != name)
                     for name, field in model.model_fields.items())


def spellings(field: FieldInfo) -> list[str]:
    """The names a field is read under (its validation aliases)."""
    return list(getattr(field.validation_alias, "choices", []))
