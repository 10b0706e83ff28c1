"""`raexmc serve`: MLflow's scoring server for a registered predictor, each JSON request checked against
request_schema first. The model loads into this process (this environment's raexmc, as `raexmc predict`). A
request's body size (413) and records (400) are bounded, so it stays inside MLflow's scoring timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import mlflow
from mlflow.pyfunc import scoring_server
from starlette.responses import Response

from ..errors import DataError, RaexmcError
from ..rae.shared_batches import MAX_BATCH_QUERIES
from ..settings import QUERY_THREADS
from .request_schema import SOURCE, checked_request
from .serving import MAX_RECORDS, RequestRefused
from .tracking.run import readable_store, tracking_uri

if TYPE_CHECKING:
    import uvicorn

Receive = Callable[[], Awaitable[dict[str, Any]]]


MAX_BODY_BYTES = 1 << 20
"""The largest request body `raexmc serve` reads by default: 1 MiB, about 1 KiB for each of MAX_RECORDS records
(a query longer than the encoder's token limit is cut there anyway)."""


def serve_model(model_uri: str, host: str, port: int, max_body_bytes: int = MAX_BODY_BYTES,
                max_records: int = MAX_RECORDS, threads: int = QUERY_THREADS) -> None:
    """Serve `model_uri` on host:port until interrupted, refusing bodies over `max_body_bytes` (413) and more than
    `max_records` records (400); scores on `threads` CPU threads, concurrent requests together."""
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
    """Run the uvicorn `server` with MAX_BATCH_QUERIES threads to score requests on. MLflow's scoring server scores
    each request on the event loop's default executor, which holds min(32, CPUs + 4) threads: on 2 cores, 6
    requests at most reached the model at once to share its next batch, and one core stayed idle under 16 clients."""
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(MAX_BATCH_QUERIES,
                                                                       thread_name_prefix="raexmc-request"))
    await server.serve()


class BodyTooLarge(DataError):
    """A request body over the server's limit: answered 413."""


class CheckedRequests:
    """ASGI middleware: a POST to /invocations is read up to `max_body_bytes` (413 beyond), and a JSON one reaches
    `app` as `checked_request` rewrites it or is answered 400 with its one line."""

    def __init__(self, app: Callable[..., Awaitable[None]], max_body_bytes: int = MAX_BODY_BYTES):
        self.app, self.max_body_bytes = app, max_body_bytes

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Callable) -> None:
        if not is_invocation(scope):
            await self.app(scope, receive, send)
            return
        try:
            body = await bounded_body(scope, receive, self.max_body_bytes)
            if media_type(scope) == "application/json":  # as the scoring server reads it
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


def is_invocation(scope: dict[str, Any]) -> bool:
    return scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/invocations"


def media_type(scope: dict[str, Any]) -> str:
    """The request's media type, without its parameters: "application/json; charset=utf-8" is JSON too."""
    content_type = dict(scope["headers"]).get(b"content-type", b"").decode("latin-1")
    return content_type.split(";")[0].strip()


async def bounded_body(scope: dict[str, Any], receive: Receive, limit: int) -> bytes:
    """The request body, or BodyTooLarge as soon as it is known to exceed `limit` bytes: from its
    Content-Length before reading any, or while reading a body that comes in chunks without one."""
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
    """A receive channel that gives `body` whole, then whatever `receive` gives (a disconnect)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive_again() -> dict[str, Any]:
        return pending.pop() if pending else await receive()
    return receive_again
