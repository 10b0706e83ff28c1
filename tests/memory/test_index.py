"""Nearest-key search: every backend against brute force, HNSW's short results and bytes, persistence, errors."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from raexmc.errors import ConfigError, DataError
from raexmc.evaluation.metrics import recall_at_k
from raexmc.memory.exact import ExactIndex
from raexmc.memory.hnsw import build_hnsw, hnsw_disk_bytes, hnsw_resident_bytes
from raexmc.memory.indexes import backend_for, build_memory_indexes, make_index, resolve_backend, search_device
from raexmc.memory.persistence import load_index, save_index
from raexmc.memory.search import EXACT_MAX_KEYS
from raexmc.memory.torch_index import TorchIndex
from raexmc.settings import SearchSettings, section_from
from tests.helpers import brute_top_k, unit_rows

BACKENDS = {"exact": ExactIndex, "torch": lambda keys: TorchIndex(keys, "cpu"),
            "torch-fp16": lambda keys: TorchIndex(keys, "cpu", half=True),
            "hnsw": lambda keys: build_hnsw(keys, M=16, ef_construction=100, threads=1, ef_search=400, progress=False)}


@pytest.fixture
def data():
    rng = np.random.default_rng(7)
    return unit_rows(rng, 300, 16), unit_rows(rng, 40, 16)


def hnsw(keys, **settings):
    return build_hnsw(keys, **{"M": 8, "ef_construction": 40, "threads": 1, "progress": False, **settings})


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("k", [1, 5, 300, 310])
def test_every_backend_is_the_brute_force_top_k_padded_past_its_keys(data, backend, k):
    """fp16 products are rescored in fp32 and HNSW's beam passes every key here: all give the exact answer."""
    keys, queries = data
    ids, sims = BACKENDS[backend](keys).search(queries, k)
    want_ids, want_sims = brute_top_k(queries, keys, k)
    assert ids.dtype == np.int64 and sims.dtype == np.float32 and ids.shape == sims.shape == (40, k)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_allclose(sims, want_sims, rtol=0, atol=1e-6)


@pytest.mark.parametrize("backend", ["exact", "torch"])
def test_no_keys_or_no_queries_and_exact_keeps_a_reference_to_float32_keys(data, backend):
    ids, sims = BACKENDS[backend](np.zeros((0, 4), np.float32)).search(np.ones((2, 4), np.float32), 3)
    assert (ids == -1).all() and np.isneginf(sims).all()
    ids, sims = BACKENDS[backend](np.eye(4, dtype=np.float32)).search(np.zeros((0, 4), np.float32), 3)
    assert ids.shape == sims.shape == (0, 3)
    assert ExactIndex(data[0]).keys is data[0]


# --- HNSW backend ------------------------------------------------------------------------------

def duplicate_keys() -> tuple[np.ndarray, np.ndarray]:
    """Hundreds of identical keys plus a few distinct ones: hnswlib's graph cannot reach k of them."""
    rng = np.random.default_rng(0)
    keys = np.vstack([np.repeat(unit_rows(rng, 1, 8), 300, axis=0), unit_rows(rng, 5, 8)])
    return keys, unit_rows(rng, 20, 8)


def test_duplicate_keys_raise_in_raw_hnswlib_but_not_in_search_which_restores_its_beam():
    keys, queries = duplicate_keys()
    index = hnsw(keys, M=4, ef_construction=10, ef_search=25)
    index.graph.set_ef(10)
    with pytest.raises(RuntimeError, match="contiguous 2D array"):
        index.graph.knn_query(queries, k=200, num_threads=1)

    ids, sims = index.search(queries, 200, ef_search=10)
    assert index.graph.ef == 25, "the beam a search set (a wider one on retries) goes back to ef_search"
    found = ids >= 0
    assert ids.shape == (20, 200) and found[:, 0].all(), "every query keeps the neighbours hnswlib did find"
    assert (np.isneginf(sims) == ~found).all()
    # Found ids are real and distinct, their similarities are the true inner products.
    for row in range(len(queries)):
        row_ids = ids[row][found[row]]
        assert len(set(row_ids.tolist())) == len(row_ids) and row_ids.max() < len(keys)
        np.testing.assert_allclose(sims[row][found[row]], keys[row_ids] @ queries[row], atol=1e-5)
    assert (np.diff(np.where(found, sims, -10.0), axis=1) <= 0).all()
    # Padding only follows found results, and each row holds as many as hnswlib can return.
    assert (found == (np.arange(200) < found.sum(axis=1, keepdims=True))).all()
    for row in range(3):
        count = int(found[row].sum())
        index.graph.set_ef(200 * 4)  # the widened beam search() retries with
        index.graph.knn_query(queries[row:row + 1], k=count, num_threads=1)
        with pytest.raises(RuntimeError):
            index.graph.knn_query(queries[row:row + 1], k=count + 1, num_threads=1)


@pytest.mark.parametrize(("count", "dim", "M"), [(4000, 16, 8), (3000, 48, 32)])
def test_disk_bytes_match_the_saved_file(tmp_path, count, dim, M):
    index = build_hnsw(np.random.default_rng(0).standard_normal((count, dim)).astype(np.float32), M=M,
                       ef_construction=40, progress=False)
    index.graph.save_index(str(tmp_path / "hnsw.bin"))
    # The upper levels are random, so the formula holds on average: within 1% at these sizes.
    assert hnsw_disk_bytes(count, dim, M) == pytest.approx((tmp_path / "hnsw.bin").stat().st_size, rel=0.01)
    # Loaded, it holds at least the level-0 block: count x (vector + 2M links + count + label).
    assert hnsw_resident_bytes(count, dim, M) > count * (4 * dim + 8 * M + 4 + 8)


def test_index_stage_says_the_bytes_it_will_write(tmp_path, capsys):
    rng = np.random.default_rng(1)
    for split, count in (("train", 3000), ("labels", 2000)):
        np.save(tmp_path / f"{split}.npy", rng.standard_normal((count, 24)).astype(np.float32))
    build_memory_indexes(tmp_path, tmp_path / "index", "hnsw", M=8, ef_construction=40, progress=False)
    said = capsys.readouterr().out
    for key_set, count in (("inputs", 3000), ("labels", 2000)):
        written = (tmp_path / "index" / key_set / "hnsw.bin").stat().st_size
        megabytes = float(re.search(rf"{key_set}: {count:,} keys x 24 dims, M=8: ([0-9.,]+) MB on disk", said)[1])
        assert megabytes == pytest.approx(written / 1e6, rel=0.01)


# --- persistence -------------------------------------------------------------------------------

@pytest.mark.parametrize(("backend", "files", "graph"), [
    ("hnsw", ["hnsw.bin", "meta.json"], {"M": 12, "ef_construction": 80, "space": "ip"}),
    ("faiss", ["faiss.bin", "meta.json"], {"M": 8, "ef_construction": 80, "compression": "sq8-m8"}),
    ("exact", ["meta.json"], {})])
def test_save_load_round_trip(tmp_path, data, backend, files, graph):
    """faiss: a compressed memory's index (quantised, its own degree), which index.backend hnsw builds."""
    keys, queries = data
    index = make_index("hnsw" if backend == "faiss" else backend, keys, M=12, ef_construction=80, threads=1,
                       progress=False, compression=graph.get("compression", "none"))
    before = index.search(queries, 15, **({"ef_search": 60} if graph else {}))
    folder = save_index(index, tmp_path / "index")
    assert sorted(p.name for p in folder.iterdir()) == files
    assert json.loads((folder / "meta.json").read_text()) == {"backend": backend, "dim": 16, "count": 300, **graph}
    loaded = load_index(folder, keys=keys, ef_search=60, threads=1)
    assert type(loaded) is type(index)
    for got, want in zip(loaded.search(queries, 15), before):
        np.testing.assert_array_equal(got, want)
    if graph:
        assert (loaded.M, loaded.ef_construction, loaded.ef_search) == (graph["M"], 80, 60)
    if backend == "faiss":
        assert loaded.compression == "sq8-m8"
    if backend == "hnsw":
        assert loaded.graph.ef == 60 and load_index(folder, ef_search=123, threads=1).graph.ef == 123
    # Saving again replaces the folder whole, leaving no temporary folders behind.
    save_index(loaded, folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]


# --- helpers and errors ------------------------------------------------------------------------

def test_recall_at_k():
    exact = np.array([[1, 2, 3, 4], [5, 6, -1, -1], [-1, -1, -1, -1]])
    approx = np.array([[4, 3, 9, 8], [6, 5, 7, -1], [1, 2, 3, 4]])
    assert recall_at_k(approx, exact) == pytest.approx((0.5 + 1.0) / 2, abs=1e-9)
    assert recall_at_k(exact, exact) == 1.0
    # An id found for another query does not count.
    assert recall_at_k(np.array([[2], [1]]), np.array([[1], [2]])) == 0.0
    with pytest.raises(DataError):
        recall_at_k(approx[:2], exact)


def test_load_errors_name_the_folder(tmp_path, data):
    keys, _ = data
    (tmp_path / "empty").mkdir()
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "meta.json").write_text(json.dumps({"backend": "annoy", "dim": 16, "count": 300}))
    exact = save_index(ExactIndex(keys), tmp_path / "exact")
    graph = save_index(hnsw(keys), tmp_path / "hnsw")
    for folder, says, loaded_with in ((tmp_path / "nowhere", "", None), (tmp_path / "empty", "meta.json", None),
                                      (tmp_path / "odd", "annoy", None), (exact, "keeps no keys", None),
                                      (exact, "shape", keys[:, :8]), (exact, "shape", keys[:10]),
                                      (graph, "", keys[:-1])):
        with pytest.raises(DataError, match=f"{folder}.*{says}"):
            load_index(folder, keys=loaded_with)
    (graph / "hnsw.bin").write_bytes(b"not a graph")
    with pytest.raises(DataError, match=f"{graph}.*hnsw.bin"):
        load_index(graph)
    (graph / "hnsw.bin").unlink()
    with pytest.raises(DataError, match=f"{graph}.*missing"):
        load_index(graph)


def test_bad_inputs(data):
    keys, queries = data
    with pytest.raises(DataError, match="dimension"):
        ExactIndex(keys).search(queries[:, :8], 3)
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        ExactIndex(keys).search(queries, 0)
    bad = keys.copy()
    bad[3, 2] = np.nan
    with pytest.raises(DataError, match="NaN"):
        ExactIndex(bad)
    with pytest.raises(DataError, match="2-D"):
        ExactIndex(keys[0])
    with pytest.raises(DataError):
        hnsw(np.zeros((0, 4), np.float32))
    with pytest.raises(ValueError, match="unknown index backend 'faiss'"):  # faiss: only as a compression
        make_index("faiss", keys, M=8, ef_construction=40, threads=1)


@pytest.mark.parametrize(("setting", "keys", "device", "expected"), [
    ("auto", EXACT_MAX_KEYS, "cpu", "exact"), ("auto", EXACT_MAX_KEYS + 1, "cpu", "hnsw"),
    ("auto", 3_553_884, "cpu", "hnsw"), ("auto", 3_553_884, "cuda", "exact"), ("auto", 10, "cuda:1", "exact"),
    ("hnsw", 10, "cuda", "hnsw"), ("hnsw", 10, "cpu", "hnsw"), ("exact", 10**7, "cpu", "exact")])
def test_auto_is_exact_on_a_gpu_and_on_the_cpu_up_to_the_crossover(setting, keys, device, expected):
    """LF-AmazonTitles-1.3M's 3.55M joint keys: a graph on the CPU, exact products on a GPU; a named backend is kept."""
    assert resolve_backend(setting, keys, device) == expected


def test_auto_counts_the_joint_keys_of_the_embeddings(tmp_path):
    for split, rows in (("train", EXACT_MAX_KEYS - 5), ("labels", 5), ("test", 100)):  # test inputs are no keys
        np.save(tmp_path / f"{split}.npy", np.zeros((rows, 2), dtype=np.float32))
    assert backend_for("auto", tmp_path) == "exact"
    np.save(tmp_path / "labels.npy", np.zeros((6, 2), dtype=np.float32))
    assert backend_for("auto", tmp_path) == "hnsw"
    assert backend_for("auto", tmp_path, "cuda") == "exact"


def test_search_device_auto_is_the_gpu_where_one_is_visible_and_a_bad_one_a_config_error_naming_the_key():
    assert search_device(SearchSettings(device="auto")) == ("cuda" if torch.cuda.is_available() else "cpu")
    for setting in ("tpu", 3, *(() if torch.cuda.is_available() else ("cuda",))):
        with pytest.raises(ConfigError, match="search.device"):
            search_device(section_from(SearchSettings, "search", {"device": setting}))
