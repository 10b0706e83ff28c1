"""A disk that cannot hold a memory-mapped output: the tokenize and embed stages end in one line naming the
file and the bytes it needs, exit 2, leave nothing behind and mark the MLflow run FAILED. Before, the first
store into the map past the free space killed the stage with SIGBUS, silently (exit -7 or 135)."""

from __future__ import annotations

import os
import sys

import pytest
from mlflow.tracking import MlflowClient

from raexmc.data.dataset import Dataset
from raexmc.data.sources import build_dataset
from raexmc.encoder.model import load_tokenizer
from raexmc.encoder.tokens import build_token_cache
from tests.helpers import REPO, run_on_small_disk, write_params

TRAIN_TEXTS = 32_768
INPUT_MAX_LEN = 128
DISK = 2 << 20  # bytes: room for the MLflow store and a file's header, not for the train split's arrays
HINT = "(outputs are written to temporary names first, so nothing half-written was kept)"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Dataset:
    folder = tmp_path_factory.mktemp("synthetic") / "data"
    build_dataset("syn", {"source": "synthetic", "n_train": TRAIN_TEXTS, "n_test": 64, "n_labels": 256,
                          "labels_per_input": 2, "input_words": [4, 8], "label_words": [3, 4], "topic_size": 32},
                  folder, "")
    return Dataset(folder)


@pytest.mark.parametrize("stage", ["tokenize", "embed"])
def test_a_stage_on_a_disk_too_small_for_its_arrays(dataset, tiny_model, tmp_path, stage):
    """The tokenize stage's uint16 token ids (MiniLM's vocabulary has 30,522 tokens) and the embed stage's float32
    vectors (the tiny encoder's 32 dimensions) of the train split."""
    params = write_params(tmp_path, **{"encoder.name": str(tiny_model), "tokenize.input_max_len": INPUT_MAX_LEN,
                                       "tokenize.label_max_len": 16, "tokenize.input_fields": "title",
                                       "embed.device": "cpu", "embed.batch_size": 256, "embed.threads": 1})
    small, tokens = tmp_path / "small", tmp_path / "tokens"
    if stage == "tokenize":
        out, needed, file = small / "tokens", TRAIN_TEXTS * INPUT_MAX_LEN * 2, "train.ids.npy"
        command = ["stages/tokenize_texts.py", "--dataset", str(dataset.folder), "--out", str(out)]
    else:
        build_token_cache(dataset, load_tokenizer(str(tiny_model)), str(tiny_model), tokens, INPUT_MAX_LEN, 16,
                          "title", "title")
        out, needed, file = small / "embeddings", TRAIN_TEXTS * 32 * 4, "train.npy"
        command = ["stages/embed.py", "--model", str(tiny_model), "--tokens", str(tokens), "--out", str(out)]
    command = [sys.executable, str(REPO / command[0]), *command[1:], "--params", str(params)]
    done = run_on_small_disk(small, DISK, command, tmp_path)
    stderr = done.proc.stderr
    assert done.proc.returncode == 2 and "Traceback" not in stderr and stderr.count("Error: ") == 1, stderr
    assert stderr.strip().splitlines()[-1].startswith(  # the error line, last after the progress bars
        f"StorageError: {out / file}: {done.error} (the array needs {needed:,} bytes) while writing: ")
    assert HINT in stderr
    assert done.left == [], "no output and no temporary folder"
    # the test's own store, named: another test in this worker may have set mlflow's process-wide URI
    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    (run,) = client.search_runs([client.get_experiment_by_name("rae-xmc").experiment_id])
    assert run.info.status == "FAILED"
