"""Answers speak the user's label ids: `raexmc predict`, the saved RaeModel and a real `mlflow models serve` give
each label's id in its dataset (here an LF lbl.json.gz whose uids are shuffled integers, none its own row)
beside its row and text."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from test_predictor import JYTHON, LABEL_TITLES, build_pipeline, logged_predictor, post_json, predictor_of
from tests.helpers import LABELS, local_server, raexmc, write_jsonl_gz

# lbl.json.gz's uid of each row: large integers (one past 2**53, which a float would round) and small ones
# that are other labels' rows, so an answer that gave a row, or another row's id, would show.
OWN_IDS = [7_340_012_553, 4, 9_007_199_254_740_993, 0, 118]


@pytest.fixture
def own_ids_built(tmp_path, lf_folder, tiny_model) -> Path:
    write_jsonl_gz(lf_folder / "lbl.json.gz", [{"uid": uid, "title": title, "content": content}
                                               for uid, (_, title, content) in zip(OWN_IDS, LABELS)])
    return build_pipeline(tmp_path, lf_folder, tiny_model, "hnsw")


def raexmc_predict(project: Path, *args: str) -> subprocess.CompletedProcess:
    return raexmc("predict", "--name", "tiny", *args, cwd=project)


def assert_own_ids(labels: list[dict]) -> None:
    """Every label of an answer carries the uid and the title lbl.json.gz gives its row."""
    assert sorted(label["label"] for label in labels) == [0, 1, 2, 3, 4]
    for label in labels:
        assert (label["id"], label["text"]) == (OWN_IDS[label["label"]], LABEL_TITLES[label["label"]])


def test_predict_answers_with_the_datasets_own_label_ids(own_ids_built):
    results, _ = predictor_of(own_ids_built).predict([JYTHON], k=5)
    assert_own_ids(results[0])
    proc = raexmc_predict(own_ids_built.parents[1], JYTHON, "-k", "5")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["labels"] == results[0]
    assert '"id": 9007199254740993,' in proc.stdout, "an integer id is printed as the integer it is"


@pytest.mark.slow
def test_served_model_answers_with_the_datasets_own_label_ids(own_ids_built, tmp_path):
    uri = logged_predictor(own_ids_built, tmp_path)
    serve = [sys.executable, "-m", "mlflow", "models", "serve", "-m", uri, "--env-manager", "local", "-h", "127.0.0.1"]
    with local_server(lambda port: [*serve, "-p", str(port)], "/ping") as base:
        status, answer = post_json(f"{base}/invocations", {"dataframe_records": [{"text": JYTHON}], "params": {"k": 5}})
    assert status == 200, answer
    assert_own_ids(answer["predictions"][0]["labels"])
    assert answer["predictions"][0]["labels"] == predictor_of(own_ids_built).predict([JYTHON], k=5)[0][0]
