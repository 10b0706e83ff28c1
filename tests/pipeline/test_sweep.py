"""Sweep helpers: override parsing, `dvc queue status` parsing, the `dvc exp show` column filter
(the whole sweep runs for real in test_pipeline.py)."""

from __future__ import annotations

import re

import pytest

from raexmc.errors import ConfigError
from raexmc.pipeline.sweep import show_columns, swept_keys, task_states

STATUS = """Task     Name        Created    Status
17f6080  stray-amie  04:10 PM   Success
263b33a  taunt-rubs  04:10 PM   Running
9c48c8a  erect-lava  04:10 PM   Queued

Worker status: 1 active, 0 idle
"""


def test_swept_keys_the_queue_status_table_and_the_exp_show_filter():
    assert swept_keys(["infer.lambda=0,0.5", "train.lr=1e-4"]) == ["infer.lambda", "train.lr"]
    for bad in ("infer.lambda", "=1", "infer.b="):
        with pytest.raises(ConfigError):
            swept_keys([bad])
    assert task_states(STATUS) == {"stray-amie": "Success", "taunt-rubs": "Running", "erect-lava": "Queued"}
    # the `dvc exp show` filter keeps exactly the swept params and key metrics
    pattern = re.compile(show_columns(["infer.b"]))
    columns = ("Experiment", "infer.b", "infer.bx", "metrics/foldoc/rae.json:P@1", "lambda",
               "metrics/foldoc/rae.json:P@10", "metrics/foldoc/knn.json:P@1", "metrics/foldoc/rae_vs_knn.json:P@1",
               "artifacts/foldoc/rae.json:P@1")
    kept = [c for c in columns if pattern.match(c)]
    assert kept == ["Experiment", "infer.b", "metrics/foldoc/rae.json:P@1", "lambda"]
