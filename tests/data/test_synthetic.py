"""The synthetic source: deterministic, of the requested shape, retrievable, with checked params,
and through every stage of the pipeline."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import scipy.sparse as sp

from raexmc.data import synthetic
from raexmc.data.catalogue import catalogue, catalogue_dir
from raexmc.data.dataset import Dataset
from raexmc.data.sources import build_dataset
from raexmc.encoder.embedding import embed_split
from raexmc.encoder.model import load_tokenizer
from raexmc.encoder.sentence import load_encoder
from raexmc.encoder.text_encoder import TextEncoder
from raexmc.encoder.tokens import TokenCache, build_token_cache
from raexmc.errors import ConfigError
from raexmc.evaluation.evaluator import Evaluator
from raexmc.evaluation.methods import evaluate_retrieval
from raexmc.evaluation.retrievals import Retrievals
from raexmc.evaluation.significance import compare_runs
from raexmc.memory.indexes import build_memory_indexes, load_joint_search
from raexmc.process_group import DistContext
from raexmc.settings import load_settings
from raexmc.training.settings import TrainSettings
from raexmc.training.train import train
from tests.helpers import REPO, rae_on, search_all

SMALL = catalogue(catalogue_dir(REPO / "params.yaml"))["synthetic-small"]
FILES = ("labels.jsonl", "train.jsonl", "test.jsonl", "Y_train.npz", "Y_test.npz", "filter_train.npz",
         "filter_test.npz", "stats.json", "source.json")


def build(tmp_path, name="synthetic-small", **changes):
    return build_dataset(name, {**SMALL, **changes}, tmp_path / name, "")


def test_one_worker_and_two_give_the_same_bytes_and_another_seed_other_data(tmp_path, monkeypatch):
    """Each chunk's rows come from its own random stream, made in whichever process: with chunks of 700
    rows (several per split, so the order of their results is tested too), RAEXMC_WORKERS=1 and 2 write
    the same files; the seed changes them."""
    monkeypatch.setattr(synthetic, "CHUNK", 700)
    for workers in ("1", "2"):
        monkeypatch.setenv("RAEXMC_WORKERS", workers)
        build(tmp_path / workers)
    build(tmp_path / "seed1", seed=1)
    one, two, seed1 = (tmp_path / run / "synthetic-small" for run in ("1", "2", "seed1"))
    for name in FILES:
        assert (one / name).read_bytes() == (two / name).read_bytes(), name
    assert len((one / "train.jsonl").read_text().splitlines()) == SMALL["n_train"] > 2 * 700
    assert (one / "train.jsonl").read_bytes() != (seed1 / "train.jsonl").read_bytes()


def test_shape_and_statistics_are_the_requested_ones_and_labels_are_retrievable_from_the_input_text(tmp_path):
    """Shared words alone (brute-force overlap, not the pipeline) find a true label far above chance."""
    stats = build(tmp_path)
    dataset = Dataset(tmp_path / "synthetic-small")
    assert (stats["N_train"], stats["N_test"], stats["L"]) == (SMALL["n_train"], SMALL["n_test"], SMALL["n_labels"])
    Y = dataset.label_matrix("train")
    assert Y.shape == (SMALL["n_train"], SMALL["n_labels"]) and np.diff(Y.indptr).min() >= 1
    assert abs(Y.nnz / Y.shape[0] - SMALL["labels_per_input"]) < 0.05 * SMALL["labels_per_input"]
    # an input's labels come from one topic: consecutive blocks of topic_size label ids
    topics = Y.indices // SMALL["topic_size"]
    assert (topics == np.repeat(topics[Y.indptr[:-1]], np.diff(Y.indptr))).all()
    freq = np.bincount(Y.indices, minlength=Y.shape[1])
    assert freq.max() > 10 * freq.mean() and np.median(freq) < freq.mean(), "heavy-tailed label frequencies"
    for split, (low, high) in (("train", SMALL["input_words"]), ("labels", SMALL["label_words"])):
        lengths = [len(text.title.split()) for text in dataset.texts(split)]
        assert low <= min(lengths) and max(lengths) <= high and len(set(lengths)) == high - low + 1
    assert dataset.filter_matrix("test").nnz == 0
    assert json.loads((dataset.folder / "source.json").read_text())["source"] == "synthetic"
    vocab = {}
    overlap = (bag_of_words(dataset.texts("test"), vocab) @ bag_of_words(dataset.texts("labels"), vocab).T).toarray()
    truth = dataset.label_matrix("test")
    top1 = overlap.argmax(axis=1)
    precision_at_1 = truth[np.arange(truth.shape[0]), top1].mean()
    chance = truth.nnz / truth.shape[0] / truth.shape[1]
    assert precision_at_1 > 0.3 > 100 * chance


def test_many_labels_per_input_keep_their_mean(tmp_path):
    stats = build(tmp_path, n_train=3000, n_test=10, n_labels=5000, labels_per_input=22.2, topic_size=256)
    assert abs(stats["avg_labels_per_input"] - 22.2) < 0.03 * 22.2


def bag_of_words(texts, vocab: dict[str, int]) -> sp.csr_matrix:
    rows, cols = [], []
    for row, text in enumerate(texts):
        for word in set(text.title.split()):
            rows.append(row)
            cols.append(vocab.setdefault(word, len(vocab)))
    return sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(row + 1, 1 << 20))


@pytest.mark.parametrize("key, value, message", [
    ("n_train", 0, "'n_train' must be an integer >= 1, got 0"),
    ("n_labels", "many", "'n_labels' must be an integer >= 1"),
    ("n_test", None, "needs 'n_test'"),
    ("seed", True, "'seed' must be an integer >= 0"),
    ("labels_per_input", 0.5, "'labels_per_input' must be a number in [1, topic_size=32]"),
    ("labels_per_input", 40, "got 40"),
    ("input_words", [16, 8], "'input_words' must be [min, max] words with 4 <= min <= max"),
    ("input_words", [2, 8], "got [2, 8]"),
    ("label_words", 6, "'label_words' must be [min, max]"),
    ("n_trian", 10, "unknown key 'n_trian'"),
])
def test_bad_params_are_config_errors_naming_the_key(tmp_path, key, value, message):
    with pytest.raises(ConfigError) as caught:
        build(tmp_path, name="bad", **{key: value})
    assert caught.value.one_line().startswith(f"ConfigError: datasets/bad.yaml:{key}: ")
    assert message in caught.value.message
    assert not (tmp_path / "bad").exists()


@pytest.mark.slow
def test_synthetic_small_goes_through_every_stage(tmp_path, tiny_model):
    """tokenize, train, embed, index, evaluate and significance, by the stages' library calls
    (a `dvc repro` of it takes minutes on our machines, most of it process start-up)."""
    build(tmp_path)
    dataset = Dataset(tmp_path / "synthetic-small")
    build_token_cache(dataset, load_tokenizer(str(tiny_model)), "tiny", tmp_path / "tokens", 16, 16, "title", "title")
    cache = TokenCache(tmp_path / "tokens")
    model = TextEncoder(load_encoder(str(tiny_model)), "cpu", "fp32")
    settings = replace(TrainSettings.from_section(load_settings(REPO / "params.yaml").train, lambda: 0), batch_size=16,
                       grad_cache_chunk=0, max_steps=4, warmup_steps=1, hnm_steps=2, hnm_topk=5, val_b=20,
                       checkpoint_every=4, embed_batch_size=256)
    curve = train(model, cache, dataset.label_matrix("train"), dataset.filter_matrix("train"), settings,
                  DistContext(0, 1, "cpu"), tmp_path / "last.pt", (0.55, 1.5), lambda step, values: None)
    assert curve[-1]["step"] == 4
    for split in ("train", "labels", "test"):
        embed_split(model, cache, split, tmp_path / f"{split}.npy", 256)
    build_memory_indexes(tmp_path, tmp_path / "index", "hnsw", M=16, ef_construction=100, progress=False)
    queries = np.load(tmp_path / "test.npy")
    joint, inputs, labels = search_all(load_joint_search(tmp_path / "index"), queries, 50, 50)
    retrievals = Retrievals(joint=joint, labels=labels, inputs=inputs)
    evaluator = Evaluator(dataset.label_matrix("train"), dataset.label_matrix("test"), dataset.filter_matrix("test"),
                          (0.55, 1.5))
    result = evaluate_retrieval(retrievals.rows, evaluator, rae_on(evaluator, 0.5, 0.04, 50))
    Y_test = dataset.label_matrix("test")
    chance_percent = 100 * Y_test.nnz / Y_test.shape[0] / Y_test.shape[1]
    assert result["methods"]["knn"]["P@1"] > 10 * chance_percent, "shared words make neighbours share labels"
    flat = {f"{m}/{k}": v for m, arrays in result["per_instance"].items() for k, v in arrays.items()}
    report = compare_runs(flat, ["P@1", "R@100"])
    assert 0 <= report["rae_vs_knn"]["P@1"]["p_value"] <= 1
