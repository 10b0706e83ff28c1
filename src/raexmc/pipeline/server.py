"""`raexmc serve`: MLflow's scoring server for a registered predictor, in this process. Body size (413) and records
(400) are bounded to stay inside MLflow's scoring timeout; each JSON request's names, params' types and "inputs" shape
are checked first, as MLflow drops unknown fields and params keys (a misspelt "topk" got the default k)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import mlflow
from mlflow.pyfunc import scoring_server
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, StrictInt, ValidationError
from pydantic.fields import FieldInfo
from starlette.responses import Response

from ..errors import ConfigError, DataError, RaexmcError
from ..rae.queries import DEEP_JSON
from ..rae.shared_batches import MAX_BATCH_QUERIES
from ..settings import QUERY_THREADS
from .serving import MAX_RECORDS, SOURCE, RequestRefused
from .tracking.run import readable_store, tracking_uri

if TYPE_CHECKING:
    import uvicorn

Receive = Callable[[], Awaitable[dict[str, Any]]]
INPUT_FORMS = '"text", ["text", ...], records [{"text": ...}] or columns {"text": [...]}'
JSON_TERMS = {"model_type": "Input should be a JSON object", "dict_type": "Input should be a JSON object",
              "list_type": "Input should be a JSON array"}  # pydantic's messages name Python types and classes
MAX_BODY_BYTES = 1 << 20  # about 1 KiB for each of MAX_RECORDS records (the encoder cuts longer queries anyway)


class QueryParams(BaseModel):
    """The request's "params": k, the labels per query (top_k, as many serving APIs call it)."""

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
    """`body` with top_k as k, or the error refusing it; a body that is no JSON object passes on as it is."""
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
    """Whether "inputs" reads as records (a text, texts, records; columns pass on as they are), else refused."""
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
    return ", ".join(name + "".join(f" or its alias {alias}" for alias in spellings(field) if alias != name)
                     for name, field in model.model_fields.items())


def spellings(field: FieldInfo) -> list[str]:
    return list(getattr(field.validation_alias, "choices", []))


def serve_model(model_uri: str, host: str, port: int, max_body_bytes: int = MAX_BODY_BYTES,
                max_records: int = MAX_RECORDS, threads: int = QUERY_THREADS) -> None:
    import torch
    import uvicorn

    torch.set_num_threads(threads)  # before the model loads: an int8 encoder takes the setting when it is built
    mlflow.set_tracking_uri(tracking_uri())
    with readable_store():  # the model's URI is resolved in the store, which may fail as for a stage
        model = mlflow.pyfunc.load_model(model_uri)
    model.unwrap_python_model().max_records = max_records
    app = CheckedRequests(scoring_server.init(model), max_body_bytes)
    asyncio.run(answer_requests(uvicorn.Server(uvicorn.Config(app, host=host, port=port))))


async def answer_requests(server: uvicorn.Server) -> None:
    """Run `server` with MAX_BATCH_QUERIES scoring threads: MLflow scores on the default executor, min(32, CPUs + 4)
    threads, so on 2 cores at most 6 requests shared a batch."""
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(MAX_BATCH_QUERIES,
                                                                       thread_name_prefix="raexmc-request"))
    await server.serve()


class BodyTooLarge(DataError):
    """A request body over the server's limit: answered 413."""


class CheckedRequests:
    """ASGI middleware: a POST to /invocations is read up to `max_body_bytes` (413 beyond); a JSON one reaches `app`
    as `checked_request` rewrites it, or is answered 400."""

    def __init__(self, app: Callable[..., Awaitable[None]], max_body_bytes: int = MAX_BODY_BYTES):
        self.app, self.max_body_bytes = app, max_body_bytes

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Callable) -> None:
        if not (scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/invocations"):
            await self.app(scope, receive, send)
            return
        try:
            body = await bounded_body(scope, receive, self.max_body_bytes)
            content_type = dict(scope["headers"]).get(b"content-type", b"").decode("latin-1")
            if content_type.split(";")[0].strip() == "application/json":  # with a charset too, as MLflow reads it
                body = checked_request(body)
        except RaexmcError as error:
            refused = RequestRefused(error)
            status = 413 if isinstance(error, BodyTooLarge) else refused.get_http_status_code()
            await Response(refused.serialize_as_json(), status, media_type="application/json")(scope, receive, send)
            return
        headers = [(name, value) for name, value in scope["headers"]
                   if name not in (b"content-length", b"transfer-encoding")]
        scope = {**scope, "headers": [*headers, (b"content-length", str(len(body)).encode())]}
        await self.app(scope, replay(body, receive), send)


async def bounded_body(scope: dict[str, Any], receive: Receive, limit: int) -> bytes:
    """The body, or BodyTooLarge once known to exceed `limit`: by its Content-Length, or while reading chunks."""
    declared = dict(scope["headers"]).get(b"content-length", b"")
    if declared.isdigit() and int(declared) > limit:
        raise too_large(f"{int(declared):,} bytes", limit)
    chunks, size = [], 0
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        if size > limit:
            raise too_large(f"over {limit:,} bytes", limit)
        if not message.get("more_body", False):
            return b"".join(chunks)


def too_large(size: str, limit: int) -> BodyTooLarge:
    return BodyTooLarge(f"the body is {size}, over the limit of {limit:,} bytes per request (raexmc serve "
                        "--max-body-bytes): send fewer records per request", SOURCE)


def replay(body: bytes, receive: Receive) -> Receive:
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive_again() -> dict[str, Any]:
        return pending.pop() if pending else await receive()
    return receive_again
