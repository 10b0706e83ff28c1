"""The evaluate stage streams the test queries in chunks: on a real dataset (FOLDOC), with the exact and the
HNSW backend, RAE over every input key or over half of them merged (with the prior), chunks of 7 queries (not a
divisor of the test set's 2,057) write exactly what one chunk holding every query writes, element by element
(slow: FOLDOC embedded and evaluated by real stage processes). The default run checks how many queries a chunk
holds when the stage is not told."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
import scipy.sparse as sp

from raexmc.data.catalogue import catalogue, catalogue_dir
from raexmc.data.dataset import Dataset
from raexmc.data.sources import build_dataset
from raexmc.encoder.embedding import embed_split
from raexmc.encoder.model import load_tokenizer
from raexmc.encoder.sentence import load_encoder
from raexmc.encoder.text_encoder import TextEncoder
from raexmc.encoder.tokens import TokenCache, build_token_cache
from raexmc.evaluation.evaluator import chunk_queries
from raexmc.memory.indexes import build_memory_indexes
from raexmc.memory.input_memory import MemorySettings, build_input_memory
from raexmc.memory.keys_values import training_values
from tests.helpers import REPO, made_up_predictor, write_params
from tune_helpers import stage_ok

MEMORIES = ((1.0, False), (0.5, True))  # (memory.keep, memory.prior)
OUTPUTS = ("metrics.json", "per_instance.npz", "lambda_sweep.json", "b_sweep.json", "segments_f1.json",
           "lambda_selection.json", "lambda_sweep.png", "b_sweep.png", "segments_f1.png", "lambda_selection.png")


@pytest.fixture(scope="module")
def foldoc_run(tmp_path_factory, tiny_model):
    """FOLDOC embedded by the tiny encoder, both backends' indexes, and the tune stage's choice on it."""
    root = tmp_path_factory.mktemp("foldoc-eval")
    build_dataset("foldoc", catalogue(catalogue_dir(REPO / "params.yaml"))["foldoc"], root / "foldoc", "")
    dataset = Dataset(root / "foldoc")
    build_token_cache(dataset, load_tokenizer(str(tiny_model)), "tiny", root / "tokens", 16, 16, "title", "title")
    model, tokens = load_encoder(str(tiny_model)), TokenCache(root / "tokens")
    (root / "emb").mkdir()
    for split in ("train", "labels", "test"):
        embed_split(TextEncoder(model, "cpu", "fp32"), tokens, split, root / "emb" / f"{split}.npy", 256)
    write_params(root, **{"infer.lambda": "auto", "infer.b_sweep": [10, 50, 100], "infer.ova_knn": True})
    for backend in ("exact", "hnsw") + (("milvus",) if importlib.util.find_spec("milvus_lite") else ()):
        build_memory_indexes(root / "emb", root / f"index-{backend}", backend, M=16, ef_construction=100,
                             progress=False)
    values = training_values(dataset.label_matrix("train"))
    for keep, prior in MEMORIES:  # RAE's input keys: all of them (the index stage's), or half, merged
        build_input_memory(np.load(root / "emb" / "train.npy"), values, MemorySettings(keep, "kmeans", prior, 0),
                           root / f"memory-{keep}", "hnsw", M=16, ef_construction=100)
    stage(root, "tune", embeddings=root / "emb", out=root / "tune")
    return root


def stage(root, name, **options):
    return stage_ok(root, root / "params.yaml", name, "foldoc", **options)


def evaluate(root, backend: str, keep: float, chunk: int, tune: str = "tune"):
    out = root / f"eval-{backend}-{keep}-{chunk}-{tune}"
    predictor = made_up_predictor(root / f"predictor-{backend}-{keep}-{tune}", root / "foldoc", root / "emb",
                                  root / f"index-{backend}", root / f"memory-{keep}", root / tune,
                                  root / "params.yaml")
    stage(root, "evaluate", embeddings=root / "emb", index=root / f"index-{backend}", tune=root / tune,
          predictor=predictor, out=out, chunk=chunk)
    return out


def test_a_chunk_holds_the_queries_whose_label_scores_fit_the_budget_and_at_least_one():
    """Worked by hand: 4 training inputs with 8 labels in all (2 each) and b 200 give each query up to
    200 x (1 + 2) = 600 label scores of 48 bytes, 28,800 bytes; 256 MiB hold 9,320 such queries, capped at 8,192
    a chunk; half of it (two workers) 4,660; a budget below one query still takes one."""
    Y_train = sp.csr_matrix(np.ones((4, 2)))
    assert chunk_queries(Y_train, 200) == 8192
    assert chunk_queries(Y_train, 200, (256 << 20) // 2) == 4660
    assert chunk_queries(Y_train, 200, 28_799) == 1
    assert chunk_queries(sp.csr_matrix((0, 5)), 10, 480 * 3) == 3, "no training input: one score per key"


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "keep"), [("exact", 1.0), ("hnsw", 1.0), ("hnsw", 0.5)])
def test_chunks_of_7_queries_write_what_one_chunk_writes(foldoc_run, backend, keep):
    n = Dataset(foldoc_run / "foldoc").stats["N_test"]
    assert n % 7 and n > 7
    whole, chunked = evaluate(foldoc_run, backend, keep, n), evaluate(foldoc_run, backend, keep, 7)

    metrics = [json.loads((folder / "metrics.json").read_text()) for folder in (whole, chunked)]
    assert metrics[0] == metrics[1]
    assert {"rae", "dual_encoder", "knn", "ova_knn"} <= set(metrics[0])
    assert metrics[0]["rae"]["P@1"] > 0 and metrics[0]["rae"]["macro-F1@5"]["all"] > 0

    arrays = [np.load(folder / "per_instance.npz") for folder in (whole, chunked)]
    assert sorted(arrays[0].files) == sorted(arrays[1].files) and len(arrays[0].files) == 4 * 14
    for name in arrays[0].files:
        assert arrays[0][name].shape == (n,), name
        np.testing.assert_array_equal(arrays[0][name], arrays[1][name], err_msg=name)
    assert arrays[0]["rae/P@1"].mean() == pytest.approx(metrics[0]["rae"]["P@1"] / 100, abs=5e-5)
    assert arrays[0]["rae/PSP@5"].mean() == pytest.approx(metrics[0]["rae"]["PSP@5"] / 100, abs=5e-5)

    for name in OUTPUTS[2:]:
        assert (whole / name).read_bytes() == (chunked / name).read_bytes(), name


@pytest.mark.slow
def test_milvus_lite_evaluates_as_the_exact_backend(foldoc_run):
    """The evaluate stage over Milvus Lite collections (HNSW, a beam past FOLDOC's keys) measures what it measures
    over exact indexes: P@1 within 0.01 (one point) for RAE and both baselines."""
    pytest.importorskip("milvus_lite")
    n = Dataset(foldoc_run / "foldoc").stats["N_test"]
    exact, milvus = (json.loads((evaluate(foldoc_run, backend, 1.0, n) / "metrics.json").read_text())
                     for backend in ("exact", "milvus"))
    for method in ("rae", "dual_encoder", "knn"):
        assert milvus[method]["P@1"] == pytest.approx(exact[method]["P@1"], abs=1.0), method


@pytest.mark.slow
def test_a_split_retrieval_in_chunks_writes_what_one_chunk_writes(foldoc_run):
    """The tune stage's choice turned to a split retrieval at label share 0.25: chunks of 7 queries write what
    one chunk writes, and each b of the sweep takes its own share of input keys (by hand: b = 10 takes 3 label
    keys, 50 takes 13, 100 takes 25, rounding half up), not a prefix of b = 200's keys."""
    import shutil

    split_tune = foldoc_run / "tune-split"
    if not split_tune.exists():
        shutil.copytree(foldoc_run / "tune", split_tune)
        selection = json.loads((split_tune / "selection.json").read_text())
        (split_tune / "selection.json").write_text(json.dumps({**selection, "retrieval": "split",
                                                               "label_share": 0.25}))
    n = Dataset(foldoc_run / "foldoc").stats["N_test"]
    outs = [evaluate(foldoc_run, "hnsw", 0.5, chunk, "tune-split") for chunk in (n, 7)]
    metrics = [json.loads((folder / "metrics.json").read_text()) for folder in outs]
    assert metrics[0] == metrics[1]
    for name in OUTPUTS[2:6]:
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes(), name
    shares = {row["b"]: row["train_key_share"] for row in json.loads((outs[0] / "b_sweep.json").read_text())}
    assert shares == {10: 70.0, 50: 74.0, 100: 75.0}
