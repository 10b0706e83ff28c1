"""`raexmc serve`: MLflow's scoring server for a registered predictor, with each JSON request checked
against the declared request schema first (request_schema), since the scoring server alone drops the
names it does not know. The model is loaded into this process, so it runs this environment's raexmc
code, as `raexmc predict` does (`mlflow models serve` runs the copy the model carries, unchecked).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import mlflow
from mlflow.pyfunc import scoring_server
from starlette.responses import Response

from ..errors import RaexmcError
from .request_schema import checked_request
from .serving import RequestRefused
from .tracking.run import readable_store, tracking_uri

Receive = Callable[[], Awaitable[dict[str, Any]]]


def serve_model(model_uri: str, host: str, port: int) -> None:
    """Load `model_uri` from the tracking store and answer on host:port until interrupted."""
    import uvicorn

    mlflow.set_tracking_uri(tracking_uri())
    with readable_store():  # the model's URI is resolved in the store, which may fail as for a stage
        model = mlflow.pyfunc.load_model(model_uri)
    uvicorn.run(CheckedRequests(scoring_server.init(model)), host=host, port=port)


class CheckedRequests:
    """ASGI middleware: a JSON POST to /invocations reaches `app` as `checked_request` rewrites it, or is
    answered 400 with its one line, in the JSON the scoring server gives a request the model refuses."""

    def __init__(self, app: Callable[..., Awaitable[None]]):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Callable) -> None:
        if not is_json_invocation(scope):
            await self.app(scope, receive, send)
            return
        try:
            body = checked_request(await whole_body(receive))
        except RaexmcError as error:
            refused = RequestRefused(error)
            answer = Response(refused.serialize_as_json(), refused.get_http_status_code(), media_type="application/json")
            await answer(scope, receive, send)
            return
        headers = [(name, value) for name, value in scope["headers"] if name != b"content-length"]
        scope = {**scope, "headers": [*headers, (b"content-length", str(len(body)).encode())]}
        await self.app(scope, replay(body, receive), send)


def is_json_invocation(scope: dict[str, Any]) -> bool:
    if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != "/invocations":
        return False
    content_type = dict(scope["headers"]).get(b"content-type", b"").decode("latin-1")
    return content_type.split(";")[0].strip() == "application/json"  # as the scoring server reads it


async def whole_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def replay(body: bytes, receive: Receive) -> Receive:
    """A receive channel that gives `body` whole, then whatever `receive` gives (a disconnect)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive_again() -> dict[str, Any]:
        return pending.pop() if pending else await receive()
    return receive_again
