"""Prediction from a built pipeline's saved model (RaeModel.save / load): it agrees with the evaluate path,
also after its folder has moved, `raexmc predict` reads arguments, files and stdin, and a real
`mlflow models serve` process answers alike."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from ruamel.yaml import YAML
from typer.testing import CliRunner

from raexmc.cli import app
from raexmc.data.dataset import Dataset, Text
from raexmc.data.sources import build_dataset
from raexmc.encoder.embedding import embed_split
from raexmc.encoder.model import load_tokenizer
from raexmc.encoder.sentence import load_encoder
from raexmc.encoder.text_encoder import TextEncoder
from raexmc.encoder.tokens import TokenCache, build_token_cache, text_of
from raexmc.encoder.vectors import load_embeddings
from raexmc.evaluation.model_search import embedded_queries, measure_model
from raexmc.evaluation.propensity import table_propensity
from raexmc.evaluation.score_file import read_scores
from raexmc.evaluation.score_report import EvalData, score_metrics
from raexmc.memory.indexes import build_memory_indexes, load_joint_search, make_index
from raexmc.memory.input_memory import InputMemory, MemorySettings, build_input_memory
from raexmc.memory.keys_values import memory_keys, training_values
from raexmc.memory.merge import JointSearch, RaeRetrieval
from raexmc.memory.persistence import saved_meta
from raexmc.rae.model import RaeModel, RaeSettings
from raexmc.rae.packaging import package_model
from raexmc.rae.ranking import top_k
from raexmc.settings import load_settings
from tests.helpers import REPO, local_server, memory_search, reseal, sh, write_params

SETTINGS = {"lambda": 0.5, "b": 8, "tau": 0.04}
RAE = RaeSettings(SETTINGS["lambda"], SETTINGS["tau"], SETTINGS["b"])
JYTHON = "jython python on the jvm"  # the first test input, as the token cache joins title and content
JYTHON_RECORD = Text(uid="s0", title="jython", content="python on the jvm")
LABEL_TITLES = ["python", "perl", "unix", "linux", "compiler"]  # tests/helpers.py's labels, by id


def build_pipeline(root: Path, lf_folder: Path, tiny_model: Path, backend: str,
                   input_fields: str = "title+content", precision: str = "fp32") -> Path:
    """artifacts/tiny/{model,tokens,embeddings,index,memory,predictor} the way the stages write them, embedded at
    `precision` (embed.precision)."""
    build_dataset("tiny", {"source": "local", "path": str(lf_folder)}, root / "data" / "tiny", "")
    dataset, folder = Dataset(root / "data" / "tiny"), root / "artifacts" / "tiny"
    shutil.copytree(tiny_model, folder / "model")
    build_token_cache(dataset, load_tokenizer(str(tiny_model)), "tiny", folder / "tokens", 16, 8, input_fields, "title")
    model, cache = load_encoder(str(tiny_model)), TokenCache(folder / "tokens")
    (folder / "embeddings").mkdir()
    encoder = TextEncoder(model, "cpu", precision)
    for split in ("train", "labels", "test"):
        embed_split(encoder, cache, split, folder / "embeddings" / f"{split}.npy", 4)
    build_memory_indexes(folder / "embeddings", folder / "index", backend, M=8, ef_construction=50)
    build_input_memory(load_embeddings(folder / "embeddings", "train"), None, MemorySettings(1.0, "kmeans", False, 0),
                       folder / "memory", backend)
    package(folder, input_fields=input_fields, precision=precision)
    return folder


def package(built: Path, settings: RaeSettings = RAE, memory: Path | None = None,
            input_fields: str = "title+content", precision: str = "fp32") -> None:
    """Save built/predictor as the package stage does, with `memory` (default: built/memory) and RAE at `settings`."""
    package_model(built / "predictor", Dataset(built.parents[1] / "data" / "tiny"),
                  TextEncoder.load(built / "model", "cpu", precision, 16), built / "index", memory or built / "memory",
                  built / "embeddings", settings, relevance="binary", input_fields=input_fields,
                  backend=backend_of(built), ef_search=50, about={"dataset": "tiny"}, M=8, ef_construction=50)


def backend_of(built: Path) -> str:
    return saved_meta(built / "index" / "inputs")["backend"]


@pytest.fixture(params=["hnsw", "exact"])
def built(request, tmp_path, pipelines) -> Path:
    return pipelines(tmp_path, request.param)


def predictor_of(folder: Path) -> RaeModel:
    return RaeModel.load(folder / "predictor")


def first_test_input_scores(built: Path, settings: RaeSettings = RAE) -> sp.csr_matrix:
    """The evaluate path: the cached embedding of test input s0 searched exactly, RAE's scores at `settings`."""
    queries = np.asarray(load_embeddings(built / "embeddings", "test"))[:1]
    joint = make_index("exact", memory_keys(built / "embeddings")).search(queries, SETTINGS["b"])
    # binary values, as the paper (t1's label 2 has relevance 0.5 in the data)
    return RaeModel(training_values(Dataset(built.parents[1] / "data" / "tiny").label_matrix("train")),
                    settings).scores(*joint)


def expected_top3_of_first_test_input(built: Path, settings: RaeSettings = RAE) -> tuple[np.ndarray, np.ndarray]:
    """The top 3 labels of first_test_input_scores, and their scores."""
    scores = first_test_input_scores(built, settings)
    top = top_k(scores, 3)[0]
    return top[top >= 0], scores[0, top[top >= 0]].toarray().ravel()


def assert_answers(answers: list[dict], labels, scores, atol: float = 1e-4) -> None:
    """An answer's labels are `labels`, in order, their scores `scores` within `atol`."""
    assert [label["label"] for label in answers] == list(labels)
    assert [label["score"] for label in answers] == pytest.approx(list(scores), abs=atol)


def assert_same_answers(got: list[list[dict]], expected: list[list[dict]], atol: float) -> None:
    """Answers (one list of labels per query) with the same labels, their scores within `atol`."""
    assert [[label["label"] for label in labels] for labels in got] == [
        [label["label"] for label in labels] for labels in expected]
    np.testing.assert_allclose([label["score"] for labels in got for label in labels],
                               [label["score"] for labels in expected for label in labels], rtol=0, atol=atol)


def test_predictions_match_the_evaluate_path_one_at_a_time_as_in_a_batch(built):
    """Query texts tokenised on the fly score like the test set's cached embeddings; one query on one CPU thread
    (load(threads=1)) answers as a batch on two: the same labels, scores within 2e-6 (a batch pads its texts)."""
    import torch

    model = predictor_of(built)
    results, timing = model.predict([JYTHON, "a small unix", JYTHON_RECORD], k=3)
    labels, scores = expected_top3_of_first_test_input(built)
    assert_answers(results[0], labels, scores)
    assert [label["text"] for label in results[0]] == [LABEL_TITLES[label] for label in labels]
    assert [r["score"] for r in results[0]] == sorted((r["score"] for r in results[0]), reverse=True)
    assert model.query_text(JYTHON_RECORD) == JYTHON and results[2] == results[0]
    assert timing.queries == 3 and timing.per_query_ms()["total"] > 0

    texts = [JYTHON, "a small unix", "perl", "a compiler for linux written in python on the jvm"]
    threads_before = torch.get_num_threads()
    try:
        batched, _ = RaeModel.load(built / "predictor", threads=2).predict(texts, k=4)
        assert torch.get_num_threads() == 2
        model = RaeModel.load(built / "predictor", threads=1)
        assert torch.get_num_threads() == 1
        alone = [model.predict([text], k=4)[0][0] for text in texts]
    finally:
        torch.set_num_threads(threads_before)
    assert_same_answers(alone, batched, 2e-6)


@pytest.mark.parametrize("built", ["exact"], indirect=True)
def test_the_package_stage_saves_the_embed_precision_and_load_encodes_at_it(built):
    """Whatever the CPU would pick for auto."""
    for precision in ("bf16", "fp32"):
        package(built, precision=precision)
        assert json.loads((built / "predictor" / "settings.json").read_text())["precision"] == precision
        assert predictor_of(built).encoder.precision == precision


def test_a_titles_model_sees_only_a_query_records_title(tmp_path, pipelines):
    """Train/serve skew: a Titles model must see only a query's title, as its training inputs did."""
    built = pipelines(tmp_path, "exact", "title")
    predictor = predictor_of(built)
    assert predictor.query_text(JYTHON_RECORD) == "jython"
    results, _ = predictor.predict([JYTHON_RECORD], k=3)
    assert_answers(results[0], *expected_top3_of_first_test_input(built))


@pytest.mark.parametrize("built", ["exact"], indirect=True)
def test_requests_that_wait_together_are_answered_in_one_call_as_each_alone(built):
    """SharedBatches: requests waiting while a call runs are answered by the next call, up to max_queries a call
    (oldest first), each with its own k, as the model answers each alone (scores within 2e-6)."""
    import threading

    from raexmc.rae.shared_batches import SharedBatches

    model = predictor_of(built)
    requests = [([JYTHON], 3), (["a small unix", "perl"], 5), (["linux compiler"], 1), ([JYTHON], 5)]
    for max_queries, call_sizes in ((64, [5]), (2, [1, 2, 2])):
        seen = []
        batches = SharedBatches(type("Counted", (), {"predict": lambda _, queries, k: (
            seen.append(len(queries)), model.predict(queries, k))[1]})(), max_queries)
        answers = [None] * len(requests)
        threads = [threading.Thread(target=lambda n=number, b=batches, a=answers: a.__setitem__(n, b.predict(
            *requests[n]))) for number in range(len(requests))]
        with batches._running:  # as if a call were running: every request waits, in this order
            for number, thread in enumerate(threads):
                thread.start()
                while len(batches._waiting) <= number:
                    thread.join(0.01)
        for thread in threads:
            thread.join()
        assert seen == call_sizes
        for (queries, k), answer in zip(requests, answers):
            assert_same_answers(answer, model.predict(queries, k)[0], 2e-6)


@pytest.mark.parametrize("built", ["hnsw"], indirect=True)
def test_predict_cli_reads_arguments_files_and_stdin_alike_and_its_errors_are_one_line(built, tmp_path, monkeypatch):
    monkeypatch.chdir(built.parents[1])
    runner = CliRunner()

    def cli(*args, input=None):
        return runner.invoke(app, ["predict", "--name", "tiny", *args], input=input)

    by_argument = cli(JYTHON, "a small unix", "-k", "2")
    assert by_argument.exit_code == 0, by_argument.output
    lines = [json.loads(line) for line in by_argument.stdout.splitlines()]
    assert [line["text"] for line in lines] == [JYTHON, "a small unix"] and all(len(l["labels"]) == 2 for l in lines)
    (tmp_path / "q.txt").write_text(f"{JYTHON}\n\na small unix\n")
    (tmp_path / "q.jsonl").write_text(json.dumps({"title": "jython", "content": "python on the jvm"}) + "\n"
                                      + json.dumps({"text": "a small unix"}) + "\n")
    from_file = cli("--file", str(tmp_path / "q.txt"), "-k", "2", "--batch-size", "1")
    from_jsonl = cli("--file", str(tmp_path / "q.jsonl"), "-k", "2")
    from_stdin = cli("-k", "2", "--verbose", input=f"{JYTHON}\na small unix\n")
    shutil.copytree(tmp_path / "artifacts" / "tiny" / "predictor", tmp_path / "elsewhere")
    from_moved = cli("--model", str(tmp_path / "elsewhere"), "--name", "nothing-built", "-k", "2", JYTHON,
                     "a small unix")
    for result in (from_file, from_jsonl, from_stdin, from_moved):
        assert result.exit_code == 0, result.output
        got = [json.loads(line) for line in result.stdout.splitlines()]
        assert [line["text"] for line in got] == [line["text"] for line in lines]
        # batches pad differently: scores may move in the 6th decimal
        assert_same_answers([line["labels"] for line in got], [line["labels"] for line in lines], 1e-5)
    assert "ms/query" in from_stdin.stderr and "all 2 queries" in from_stdin.stderr
    scored = cli("--scores-out", str(tmp_path / "preds.npz"), JYTHON, "a small unix")
    assert scored.exit_code == 0 and scored.stdout == "", scored.output
    matrix = read_scores(tmp_path / "preds.npz", 2, 5, 100)  # a score file, as `raexmc evaluate --scores` reads it
    for row, line in zip(matrix, lines):
        ranked = row.indices[np.argsort(-row.data)]
        assert list(ranked[:2]) == [label["label"] for label in line["labels"]]
        assert (np.diff(np.sort(row.data)) > 0).all(), "strictly decreasing: every tool ranks it alike"

    # errors: the tiny model has 5 labels, without -k the answer holds all 5 (10 would be refused as > L, as 6 is);
    # encoder weights cut short (a copy or a save that stopped) were a traceback from safetensors
    (tmp_path / "bad.jsonl").write_text('{"text": "perl"}\nnot json\n')
    bad = cli("--file", str(tmp_path / "bad.jsonl"))
    assert bad.exit_code == 2 and bad.stderr.strip().count("\n") == 0
    assert f"{tmp_path / 'bad.jsonl'}:2" in bad.stderr
    missing = cli("perl", "--name", "nothing-built")
    assert missing.exit_code == 2 and "run the package stage" in missing.stderr
    result = cli("perl")
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["labels"]) == 5
    assert cli("perl", "-k", "6").exit_code == 2
    weights = built / "predictor" / "encoder" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:4096])
    reseal(built / "predictor")  # past the manifest's check of its size: the weights' reader names it too
    cut = cli("perl")
    assert cut.exit_code == 2 and "Traceback" not in cut.output
    [line] = cut.stderr.strip().splitlines()
    assert line.startswith(f"DataError: {weights}: cannot read the encoder's weights (Error while deserializing "), line
    assert line.endswith("): rerun the stage that writes it"), line


def test_an_int8_model_encodes_and_serves_queries_as_the_int8_embed_stage_did(tmp_path, pipelines, monkeypatch):
    """embed.precision int8: the packaged model encodes a query to the embed stage's int8 vector (not fp32's), so
    predict and the served model (through `raexmc serve`'s own app) rank as the evaluate path does."""
    from mlflow.pyfunc import scoring_server
    from starlette.testclient import TestClient

    from raexmc.pipeline.server import CheckedRequests

    built = pipelines(tmp_path, "exact", "title+content", "int8")
    model = predictor_of(built)
    assert model.encoder.precision == "int8"
    cached = np.asarray(load_embeddings(built / "embeddings", "test"))[0]
    np.testing.assert_allclose(model.encoder.embed_texts([JYTHON])[0], cached, rtol=0, atol=1e-6)
    fp32 = TextEncoder.load(built / "model", "cpu", "fp32", 16).embed_texts([JYTHON])[0]
    assert np.abs(fp32 - cached).max() > 1e-4
    expected = expected_top3_of_first_test_input(built)
    assert_answers(model.predict([JYTHON], k=3)[0][0], *expected)
    _, served = logged_and_loaded(built, tmp_path, monkeypatch)
    answer = TestClient(CheckedRequests(scoring_server.init(served))).post(
        "/invocations", json={"dataframe_records": [{"text": JYTHON}], "params": {"k": 3}})
    assert answer.status_code == 200, answer.text
    assert_answers(answer.json()["predictions"][0]["labels"], *expected)


NOT_UTF8 = b"perl\n\xff\xfe bad\n"  # line 2 starts with a byte no UTF-8 text has


@pytest.mark.parametrize(("args", "stdin", "error"), [
    (["--file", "q.txt"], None, "DataError: q.txt:2: not UTF-8 text (byte 0xff at column 1)"),
    ([], NOT_UTF8, "DataError: <stdin>:2: not UTF-8 text (byte 0xff at column 1)"),
    (["perl", "  "], None, "DataError: <arguments>:2: empty query"),
    ([""], None, "DataError: <arguments>:1: empty query"),
    ([b"a\xffb"], None, "DataError: <arguments>:1: not UTF-8 text (character 2)"),
    (["--jsonl"], b'{"text": "perl"}\n{"text": ""}\n', "DataError: <stdin>:2: empty query"),
    (["--file", "blank.txt"], None, "DataError: blank.txt: no query: the input has no non-blank line"),
    (["--file", "empty.jsonl"], None, "DataError: empty.jsonl: no query: the input has no non-blank line"),
    ([], b"\n \n", "DataError: <stdin>: no query: the input has no non-blank line")])
def test_predict_refuses_bad_query_text_in_one_line(tmp_path, monkeypatch, args, stdin, error):
    """`raexmc predict`: non-UTF-8 text, an empty text and no query at all are one-line errors, before any model
    loads; run in this process, and as a process for the undecodable argument (its stderr holds that line alone)."""
    (tmp_path / "q.txt").write_bytes(NOT_UTF8)
    (tmp_path / "blank.txt").write_bytes(b"\n  \n\t\n")
    (tmp_path / "empty.jsonl").write_bytes(b"")
    command = ["predict", "--name", "tiny", *args]
    if any(isinstance(arg, bytes) for arg in args):
        proc = subprocess.run([sys.executable, "-m", "raexmc.cli", *command], cwd=tmp_path, input=b"",
                              capture_output=True)
        got = proc.returncode, proc.stdout.decode(), proc.stderr.decode()
    else:
        monkeypatch.chdir(tmp_path)
        result = CliRunner().invoke(app, command, input=stdin or b"")
        got = result.exit_code, result.stdout, result.stderr
    assert (got[0], got[1], got[2].splitlines()) == (2, "", [error])


def post_json(url: str, body: dict) -> tuple[int, dict]:
    """The HTTP status and JSON answer of a POST (a 4xx answer too)."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


BAD_REQUESTS = [  # (request, the one line the answer's message must be); tests/helpers.py's tiny dataset has 5 labels
    ({"dataframe_records": [{"id": 7}], "params": {"k": 3}},
     'DataError: request: no query: each record needs a "text" (or "title") string'),
    ({"dataframe_records": [{"text": "perl"}, {"content": "a language"}], "params": {"k": 3}},
     'DataError: request:1: a query needs a "text" (or "title") string'),
    ({"dataframe_records": [{"text": ""}], "params": {"k": 3}}, "DataError: request:0: empty query"),
    ({"dataframe_records": [{"text": "perl"}], "params": {"k": 0}}, "ConfigError: k must be an integer >= 1, got 0"),
    ({"dataframe_records": [{"text": "perl"}], "params": {"k": 200_000_000}},
     "ConfigError: k must be at most 5 (the number of labels), got 200000000")]


def logged_predictor(built: Path, tmp_path: Path) -> str:
    """Log and register the predictor of `built` as the package stage does; its model URI."""
    from mlflow.tracking import MlflowClient

    from raexmc.pipeline.serving import log_predictor
    from raexmc.pipeline.tracking.run import tracking_uri

    client = MlflowClient(tracking_uri())
    experiment = client.create_experiment("serve-test", artifact_location=(tmp_path / "mlartifacts").as_uri())
    run_id = client.create_run(experiment).info.run_id
    return log_predictor(run_id, built / "predictor", "raexmc-tiny", "candidate")


def logged_and_loaded(built: Path, tmp_path: Path, monkeypatch) -> tuple[set[str], object]:
    """The logged model's indexes (folders under its artifacts, as predictor/<key set>) and the model loaded
    back from its downloaded copy, as a server loads it."""
    import mlflow

    folder = Path(mlflow.artifacts.download_artifacts(artifact_uri=logged_predictor(built, tmp_path),
                                                      dst_path=str(tmp_path / "downloaded")))
    monkeypatch.setattr(sys, "path", list(sys.path))  # loading prepends the model's code folder
    indexes = {meta.parent.relative_to(folder / "artifacts").as_posix()
               for meta in (folder / "artifacts").glob("*/*/meta.json")}
    return indexes, mlflow.pyfunc.load_model(str(folder))


PERL = {"dataframe_records": [{"text": "perl"}]}
SCHEMA_REFUSALS = [  # (request, the one line the answer's message must be)
    ({**PERL, "params": {"topk": 2}},
     'ConfigError: request: unknown params key "topk" (accepted: k or its alias top_k)'),
    ({**PERL, "bogus": 1}, 'DataError: request: unknown field "bogus" '
                           '(accepted: dataframe_records, dataframe_split, inputs, instances, params)'),
    ({**PERL, "params": {"k": 2, "top_k": 3}},
     'ConfigError: request: params give k twice, as "k" and "top_k": give one'),
    ({**PERL, "params": {"k": "2"}}, "ConfigError: request: params.k: Input should be a valid integer"),
    ({**PERL, "params": [2]}, "ConfigError: request: params: Input should be a JSON object")]


@pytest.mark.slow
@pytest.mark.parametrize("built", ["hnsw"], indirect=True)
def test_served_model_answers_like_predict_and_refuses_bad_requests_in_one_line_in_both_servers(built, tmp_path):
    """Log and register the predictor, serve it with a real `mlflow models serve`, ask over HTTP; a bad request
    (no text, k=0, an empty text, a huge k) is a 400 with a one-line message."""
    from mlflow.tracking import MlflowClient

    from raexmc.pipeline.tracking.run import tracking_uri

    uri = logged_predictor(built, tmp_path)
    assert uri == "models:/raexmc-tiny@candidate"
    assert str(MlflowClient(tracking_uri()).get_model_version_by_alias("raexmc-tiny", "candidate").version) == "1"

    serve = [sys.executable, "-m", "mlflow", "models", "serve", "-m", uri, "--env-manager", "local", "-h", "127.0.0.1"]
    with local_server(lambda port: [*serve, "-p", str(port)], "/ping") as base:
        status, answer = post_json(f"{base}/invocations",
                                   {"dataframe_records": [{"title": "jython", "content": "python on the jvm"},
                                                          {"text": "a small unix"}], "params": {"k": 3}})
        refusals = [post_json(f"{base}/invocations", request) for request, _ in BAD_REQUESTS]
        default_k = post_json(f"{base}/invocations", {"dataframe_records": [{"text": "perl"}]})
    expected, _ = predictor_of(built).predict([JYTHON, "a small unix"], k=3)
    assert status == 200
    assert [row["labels"] for row in answer["predictions"]] == expected
    assert [row["text"] for row in answer["predictions"]] == [JYTHON, "a small unix"]
    assert default_k[0] == 200 and len(default_k[1]["predictions"][0]["labels"]) == 5, "no k: all 5 labels"
    for (status, refusal), (_, line) in zip(refusals, BAD_REQUESTS):
        assert (status, refusal["message"]) == (400, line)
        assert "stack_trace" not in refusal

    # A real `raexmc serve` process. MLflow's scoring server drops a top-level field or params key it does not know:
    # {"top_k": 2} and {"bogus": 1} were answered 200 with the default k. Now an unknown name is 400 naming it and
    # the names accepted, top_k is read as k, and the model's own refusals still come through.
    write_params(tmp_path, **{"data.name": "tiny"})  # package.model_name null, alias candidate
    serve = [sys.executable, "-m", "raexmc.cli", "serve", "--params", str(tmp_path / "params.yaml"), "--port"]
    with local_server(lambda port: [*serve, str(port)], "/ping") as base:
        by_k = post_json(f"{base}/invocations", {**PERL, "params": {"k": 2}})
        by_top_k = post_json(f"{base}/invocations", {**PERL, "params": {"top_k": 2}})
        inputs_top_k = post_json(f"{base}/invocations", {"inputs": {"text": ["perl"]}, "params": {"top_k": 1}})
        texts = post_json(f"{base}/invocations", {"inputs": ["perl"], "params": {"k": 2}})
        refusals = [post_json(f"{base}/invocations", request) for request, _ in SCHEMA_REFUSALS + BAD_REQUESTS]
    expected, _ = predictor_of(built).predict(["perl"], k=2)
    assert by_k == by_top_k == texts == (200, {"predictions": [{"text": "perl", "labels": expected[0]}]})
    assert inputs_top_k[0] == 200 and inputs_top_k[1]["predictions"][0]["labels"] == expected[0][:1]
    for (status, refusal), (_, line) in zip(refusals, SCHEMA_REFUSALS + BAD_REQUESTS):
        assert (status, refusal["message"]) == (400, line)
        assert "stack_trace" not in refusal


@pytest.mark.parametrize("built", ["exact", "hnsw"], indirect=True)
def test_a_moved_model_scores_the_test_set_as_the_evaluate_stage_does(built, tmp_path):
    """Save, move the folder, delete the project, load: RAE's test-set scores are the evaluate stage's to 1e-6
    (1e-4 from texts), with a smaller memory, the prior, a split retrieval and non-default λ, τ, b, so each must
    travel in the folder."""
    dataset = Dataset(built.parents[1] / "data" / "tiny")
    Y = training_values(dataset.label_matrix("train"))
    build_input_memory(load_embeddings(built / "embeddings", "train"), Y, MemorySettings(0.5, "kmeans", True, 0),
                       tmp_path / "memory", backend_of(built), M=8, ef_construction=50)
    settings = RaeSettings(0.3, 0.05, 6, RaeRetrieval("split", 0.5))
    package(built, settings, memory=tmp_path / "memory")

    memory, queries = InputMemory(tmp_path / "memory"), np.asarray(load_embeddings(built / "embeddings", "test"))
    keys = memory_keys(built / "embeddings") if backend_of(built) == "exact" else None
    joint, _, _, _ = memory_search(memory, load_joint_search(built / "index", keys, 50), queries, settings.b,
                                   settings.b, settings.tau, 50, retrieval=settings.retrieval)
    evaluated = RaeModel(memory.values(Y), RaeSettings(settings.lam, settings.tau, settings.b)).scores(*joint)
    assert memory.log_counts() is not None and evaluated.nnz > 0
    texts = [text_of(record, "title+content") for record in dataset.texts("test")]
    moved = Path(shutil.move(built / "predictor", tmp_path / "elsewhere"))
    for left in ("artifacts", "data", "memory"):  # nothing of the project is left for the model to lean on
        shutil.rmtree(tmp_path / left)

    model = RaeModel.load(moved)
    np.testing.assert_allclose(model.scores_for(queries).toarray(), evaluated.toarray(), rtol=0, atol=1e-6)
    searched = RaeModel.load(moved, needs=("search",))  # as evaluate loads it: for the embed stage's vectors
    assert searched.encoder is None
    np.testing.assert_array_equal(searched.scores_for(queries).toarray(), model.scores_for(queries).toarray())
    # the texts encoded afresh, in another batch than the embed stage's: their vectors differ from the cached ones by
    # about 2.5e-5 a coordinate (padding and batch shape), which τ = 0.05 turns into about 1.3e-5 in a score
    from_texts = model.scores_for(model.encoder.embed_texts(texts))
    np.testing.assert_allclose(from_texts.toarray(), evaluated.toarray(), rtol=0, atol=1e-4)


def stage_command(name: str, *args: str) -> list[str]:
    """The stage's command as dvc.yaml runs it for data.name tiny, with `args` after it."""
    command = YAML(typ="safe").load(REPO / "dvc.yaml")["stages"][name]["cmd"].replace("${data.name}", "tiny")
    script, *options = command.split()[1:]
    return [sys.executable, str(REPO / script), *options, *args]


@pytest.mark.parametrize("built", ["hnsw"], indirect=True)
def test_raexmc_evaluate_scores_a_model_folder_as_the_evaluate_stage_does(built):
    """The stages as dvc.yaml runs them, then `raexmc evaluate --model` on the folder and dataset alone: the
    embed stage's vectors to the bit and metrics.json's metrics to every digit."""
    root = built.parents[1]
    write_params(root, **{"data.name": "tiny", "tokenize.input_max_len": 16, "embed.batch_size": 4,
                          "infer.val_fraction": 0.25, "infer.b": 8, "infer.b_sweep": [4, 8], "infer.ef_search": 50,
                          "index.M": 8, "index.ef_construction": 50})
    shutil.rmtree(built / "predictor")
    for stage in ("embed", "tune", "package", "evaluate"):
        sh(*stage_command(stage), cwd=root)
    cli = sh(sys.executable, "-m", "raexmc.cli", "evaluate", "--model", "artifacts/tiny/predictor", "--dataset",
             "data/tiny", "--out", "m.json", "--per-instance", "p.npz", cwd=root)
    stage, ours = (json.loads(path.read_text()) for path in (built / "eval" / "metrics.json", root / "m.json"))
    assert stage["knn"]["tau"] == json.loads((built / "tune" / "selection.json").read_text())["baselines"]["knn"]["tau"]
    for name in ("rae", "dual_encoder", "knn", "memory", "propensity", "retrieval", "served"):
        assert ours[name] == stage[name], name
    assert stage["served"] == {"same_search": 1}
    assert re.search(rf"^P@1 +{stage['rae']['P@1']:.2f} ", cli.stdout, re.M) and "rae vs knn: P@1 " in cli.stdout
    stage_values, our_values = np.load(built / "eval" / "per_instance.npz"), np.load(root / "p.npz")
    for key in our_values:
        np.testing.assert_array_equal(our_values[key], stage_values[key])
    model, dataset = RaeModel.load(built / "predictor"), Dataset(root / "data" / "tiny")
    np.testing.assert_array_equal(embedded_queries(model, dataset, 4, "float32"),
                                  np.load(built / "embeddings" / "test.npy"))


@pytest.mark.parametrize("built", ["hnsw"], indirect=True)
def test_a_served_search_that_differs_and_a_compressed_memory_score_as_evaluated(built, tmp_path, monkeypatch):
    """A served search that differs (exact, its first key left out): metrics.json's `served` holds RAE's headline
    through each search. memory.compression sq8-m4: the folder carries both faiss indexes and predicts as that
    memory evaluates; the logged model carries none of the index stage's indexes, and answers alike."""
    root, model = built.parents[1], RaeModel.load(built / "predictor")
    dataset, queries = Dataset(root / "data" / "tiny"), np.asarray(load_embeddings(built / "embeddings", "test"))
    keys = memory_keys(built / "embeddings").copy()
    keys[0] = -keys[0]  # training input t0 now points away from every query: the served search never finds it
    exact = JointSearch(make_index("exact", keys[:4]), make_index("exact", keys[4:]))
    served = dataclasses.replace(model, search=exact)
    p = load_settings(write_params(root, **{"data.name": "tiny"}))
    propensity = table_propensity(dataset.names)
    metrics, _, _ = measure_model(model, dataset, queries, p, propensity, knn_tau=0.04, served=served)
    test = EvalData(dataset.label_matrix("train"), dataset.label_matrix("test"), dataset.filter_matrix("test"),
                    dataset.names)
    expected = {name: score_metrics(test, searched.scores_for(queries), propensity)[0]
                for name, searched in (("evaluated", model), ("served", served))}
    assert metrics["served"]["same_search"] == 0 and metrics["served"]["queries"] == 2
    for name in ("evaluated", "served"):
        assert metrics["served"][name] == {k: expected[name][k] for k in metrics["served"][name]}, name
    assert metrics["served"]["evaluated"]["P@1"] == metrics["rae"]["P@1"]

    Y = training_values(dataset.label_matrix("train"))
    build_input_memory(load_embeddings(built / "embeddings", "train"), Y,
                       MemorySettings(1.0, "kmeans", False, 0, "sq8-m4"), tmp_path / "memory", "hnsw",
                       labels=load_embeddings(built / "embeddings", "labels"), M=8, ef_construction=50)
    memory = InputMemory(tmp_path / "memory")
    package(built, memory=tmp_path / "memory")
    assert all((built / "predictor" / key_set / "faiss.bin").is_file() for key_set in ("inputs", "labels"))
    predictor = predictor_of(built)
    assert (predictor.search.inputs.backend, predictor.search.labels.backend) == ("faiss", "faiss")
    assert predictor.about["memory"]["compression"] == "sq8-m4"
    results, _ = predictor.predict([JYTHON], k=3)

    queries = np.asarray(load_embeddings(built / "embeddings", "test"))[:1]
    joint, _, _, _ = memory_search(memory, load_joint_search(built / "index", ef_search=50), queries,
                                   SETTINGS["b"], 2, SETTINGS["tau"], ef_search=50)
    top = top_k(RaeModel(Y, RAE).scores(*joint), 3)[0]
    assert [r["label"] for r in results[0]] == list(top[top >= 0])

    indexes, model = logged_and_loaded(built, tmp_path, monkeypatch)
    assert indexes == {"predictor/inputs", "predictor/labels"}
    assert model.predict(pd.DataFrame({"text": [JYTHON]}), params={"k": 3})["labels"].tolist() == results
