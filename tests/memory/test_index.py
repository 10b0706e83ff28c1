"""Nearest-key search: exact ground truth, HNSW against it, short results, persistence, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from raexmc.errors import ConfigError, DataError
from raexmc.evaluation.recall import recall_at_k
from raexmc.memory.exact import ExactIndex
from raexmc.memory.hnsw import HnswIndex, build_hnsw
from raexmc.memory.indexes import backend_for, make_index, resolve_backend, search_device
from raexmc.memory.persistence import load_index, save_index
from raexmc.memory.search import EXACT_MAX_KEYS
from raexmc.memory.torch_index import TorchIndex
from raexmc.settings import SearchSettings, section_from
from tests.helpers import unit_rows


def reference_top_k(queries: np.ndarray, keys: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Full sort of every similarity row (descending, ties by id), padded to k."""
    scores = queries.astype(np.float32) @ keys.astype(np.float32).T
    ids = np.full((len(queries), k), -1, dtype=np.int64)
    sims = np.full((len(queries), k), -np.inf, dtype=np.float32)
    for row, line in enumerate(scores):
        order = sorted(range(len(line)), key=lambda key: (-line[key], key))[:k]
        ids[row, :len(order)] = order
        sims[row, :len(order)] = line[order]
    return ids, sims


@pytest.fixture
def data():
    rng = np.random.default_rng(7)
    return unit_rows(rng, 300, 16), unit_rows(rng, 40, 16)


# --- exact backend -----------------------------------------------------------------------------

@pytest.mark.parametrize("k", [1, 5, 300, 310])
def test_exact_matches_full_sort(data, k):
    keys, queries = data
    ids, sims = ExactIndex(keys).search(queries, k)
    want_ids, want_sims = reference_top_k(queries, keys, k)
    assert ids.dtype == np.int64 and sims.dtype == np.float32 and ids.shape == sims.shape == (40, k)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_allclose(sims, want_sims, rtol=1e-6, atol=1e-6)
    if k > len(keys):
        assert (ids[:, len(keys):] == -1).all() and np.isneginf(sims[:, len(keys):]).all()


def test_exact_breaks_ties_by_smaller_id():
    rng = np.random.default_rng(1)
    base = unit_rows(rng, 3, 8)
    # Keys 0..9 are one vector, 10..19 another, then a third: heavy ties at the cut.
    keys = np.vstack([np.repeat(base[:1], 10, 0), np.repeat(base[1:2], 10, 0), base[2:]])
    ids, sims = ExactIndex(keys, chunk_rows=2).search(base, 4)
    np.testing.assert_array_equal(ids[0], [0, 1, 2, 3])
    np.testing.assert_array_equal(ids[1], [10, 11, 12, 13])
    assert ids[2, 0] == 20
    assert (np.diff(sims, axis=1) <= 0).all()


def test_exact_chunking_bounds_memory_and_keeps_results(data, monkeypatch):
    keys, queries = data
    one_pass = ExactIndex(keys, chunk_rows=10_000).search(queries, 12)

    blocks = []

    class Recording(ExactIndex):
        def _scores(self, chunk):
            block = super()._scores(chunk)
            blocks.append(block.shape)
            return block

    # A tiny selection budget forces the row-by-row selection path as well.
    monkeypatch.setattr("raexmc.memory.exact.SELECT_BUDGET", 2 * len(keys))
    chunked = Recording(keys, chunk_rows=7).search(queries, 12)
    assert blocks and all(rows <= 7 and cols == len(keys) for rows, cols in blocks)
    assert sum(rows for rows, _ in blocks) == len(queries)
    np.testing.assert_array_equal(chunked[0], one_pass[0])
    # BLAS may round differently for another block shape, so similarities agree to float32 precision.
    np.testing.assert_allclose(chunked[1], one_pass[1], rtol=0, atol=1e-6)


def test_exact_keeps_a_reference_to_float32_keys(data):
    keys, _ = data
    assert ExactIndex(keys).keys is keys


def test_exact_empty_inputs():
    ids, sims = ExactIndex(np.zeros((0, 4), np.float32)).search(np.ones((2, 4), np.float32), 3)
    assert (ids == -1).all() and np.isneginf(sims).all()
    ids, sims = ExactIndex(np.eye(4, dtype=np.float32)).search(np.zeros((0, 4), np.float32), 3)
    assert ids.shape == sims.shape == (0, 3)


# --- HNSW backend ------------------------------------------------------------------------------

def test_hnsw_agrees_with_exact():
    rng = np.random.default_rng(3)
    keys, queries = unit_rows(rng, 2000, 32), unit_rows(rng, 100, 32)
    index = build_hnsw(keys, M=16, ef_construction=100, threads=2, progress=False)
    assert isinstance(index, HnswIndex) and index.count == 2000 and index.dim == 32
    ids, sims = index.search(queries, 10, ef_search=100)
    exact_ids, exact_sims = ExactIndex(keys).search(queries, 10)
    assert ids.dtype == np.int64 and sims.dtype == np.float32 and ids.shape == (100, 10)
    assert recall_at_k(ids, exact_ids) >= 0.99
    found = ids == exact_ids
    np.testing.assert_allclose(sims[found], exact_sims[found], atol=1e-5)
    assert (np.diff(sims, axis=1) <= 0).all()


def test_hnsw_k_above_count_pads():
    rng = np.random.default_rng(4)
    keys = unit_rows(rng, 30, 8)
    index = build_hnsw(keys, M=8, ef_construction=50, threads=1, progress=False)
    ids, sims = index.search(keys[:5], 40, ef_search=50)
    assert ids.shape == (5, 40)
    assert (ids[:, 30:] == -1).all() and np.isneginf(sims[:, 30:]).all()
    exact_ids, _ = ExactIndex(keys).search(keys[:5], 40)
    assert recall_at_k(ids, exact_ids) == 1.0


def duplicate_keys() -> tuple[np.ndarray, np.ndarray]:
    """Hundreds of identical keys plus a few distinct ones: hnswlib's graph cannot reach k of them."""
    rng = np.random.default_rng(0)
    same = unit_rows(rng, 1, 8)
    keys = np.vstack([np.repeat(same, 300, axis=0), unit_rows(rng, 5, 8)])
    return keys, unit_rows(rng, 20, 8)


def test_duplicate_keys_raise_in_raw_hnswlib_but_not_in_search():
    keys, queries = duplicate_keys()
    index = build_hnsw(keys, M=4, ef_construction=10, threads=1, progress=False)
    index.graph.set_ef(10)
    with pytest.raises(RuntimeError, match="contiguous 2D array"):
        index.graph.knn_query(queries, k=200, num_threads=1)

    ids, sims = index.search(queries, 200, ef_search=10)
    assert ids.shape == sims.shape == (20, 200)
    found = ids >= 0
    assert found[:, 0].all(), "every query keeps the neighbours hnswlib did find"
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


def test_search_restores_configured_ef():
    keys, queries = duplicate_keys()
    index = build_hnsw(keys, M=4, ef_construction=10, threads=1, ef_search=25, progress=False)
    index.search(queries, 200)
    assert index.graph.ef == 25


# --- persistence -------------------------------------------------------------------------------

def test_hnsw_save_load_round_trip(tmp_path):
    rng = np.random.default_rng(5)
    keys, queries = unit_rows(rng, 500, 16), unit_rows(rng, 30, 16)
    index = build_hnsw(keys, M=12, ef_construction=80, threads=1, progress=False)
    before = index.search(queries, 15, ef_search=60)
    folder = save_index(index, tmp_path / "index")
    assert sorted(p.name for p in folder.iterdir()) == ["hnsw.bin", "meta.json"]
    meta = json.loads((folder / "meta.json").read_text())
    assert meta == {"backend": "hnsw", "dim": 16, "count": 500, "M": 12, "ef_construction": 80, "space": "ip"}

    loaded = load_index(folder, keys=keys, ef_search=60, threads=1)
    assert isinstance(loaded, HnswIndex) and loaded.M == 12 and loaded.ef_construction == 80
    assert loaded.graph.ef == 60 and loaded.ef_search == 60
    after = loaded.search(queries, 15)
    np.testing.assert_array_equal(after[0], before[0])
    np.testing.assert_array_equal(after[1], before[1])
    assert load_index(folder, ef_search=123, threads=1).graph.ef == 123

    # Saving again replaces the folder whole, leaving no temporary folders behind.
    save_index(loaded, folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]


def test_exact_save_load_round_trip(tmp_path, data):
    keys, queries = data
    folder = save_index(ExactIndex(keys), tmp_path / "exact")
    assert [p.name for p in folder.iterdir()] == ["meta.json"]
    assert json.loads((folder / "meta.json").read_text()) == {"backend": "exact", "dim": 16, "count": 300}
    loaded = load_index(folder, keys=keys)
    assert isinstance(loaded, ExactIndex)
    np.testing.assert_array_equal(loaded.search(queries, 9)[0], ExactIndex(keys).search(queries, 9)[0])


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


def test_make_index_backends(data):
    keys, _ = data
    assert isinstance(make_index("exact", keys), ExactIndex)
    hnsw = make_index("hnsw", keys, M=8, ef_construction=40, threads=1, progress=False)
    assert isinstance(hnsw, HnswIndex) and hnsw.M == 8
    with pytest.raises(ValueError, match="unknown index backend 'faiss'"):
        make_index("faiss", keys, M=8, ef_construction=40, threads=1)


def test_load_errors_name_the_folder(tmp_path, data):
    keys, _ = data
    missing = tmp_path / "nowhere"
    with pytest.raises(DataError, match=str(missing)):
        load_index(missing)

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="meta.json"):
        load_index(empty)

    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / "meta.json").write_text(json.dumps({"backend": "annoy", "dim": 16, "count": 300}))
    with pytest.raises(DataError, match=f"{odd}.*annoy"):
        load_index(odd)

    exact = save_index(ExactIndex(keys), tmp_path / "exact")
    with pytest.raises(DataError, match=str(exact)):
        load_index(exact)  # no keys
    with pytest.raises(DataError, match=f"{exact}.*shape"):
        load_index(exact, keys=keys[:, :8])
    with pytest.raises(DataError, match=f"{exact}.*shape"):
        load_index(exact, keys=keys[:10])

    hnsw = save_index(build_hnsw(keys, M=8, ef_construction=40, threads=1, progress=False), tmp_path / "hnsw")
    with pytest.raises(DataError, match=str(hnsw)):
        load_index(hnsw, keys=keys[:-1])
    (hnsw / "hnsw.bin").write_bytes(b"not a graph")
    with pytest.raises(DataError, match=f"{hnsw}.*hnsw.bin"):
        load_index(hnsw)
    (hnsw / "hnsw.bin").unlink()
    with pytest.raises(DataError, match=f"{hnsw}.*missing"):
        load_index(hnsw)


def test_bad_inputs(data):
    keys, queries = data
    index = ExactIndex(keys)
    with pytest.raises(DataError, match="dimension"):
        index.search(queries[:, :8], 3)
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        index.search(queries, 0)
    bad = keys.copy()
    bad[3, 2] = np.nan
    with pytest.raises(DataError, match="NaN"):
        ExactIndex(bad)
    with pytest.raises(DataError, match="2-D"):
        ExactIndex(keys[0])
    with pytest.raises(DataError):
        build_hnsw(np.zeros((0, 4), np.float32), threads=1, progress=False)


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


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no GPU visible"))])
def test_an_exact_index_reopens_on_the_device_it_searches_on(tmp_path, data, device):
    """The CPU's ExactIndex on the CPU, TorchIndex on a GPU: the same answers."""
    keys, queries = data
    save_index(make_index("exact", keys), tmp_path / "exact")
    index = load_index(tmp_path / "exact", keys=keys, device=device)
    assert isinstance(index, TorchIndex if device == "cuda" else ExactIndex)
    np.testing.assert_array_equal(index.search(queries, 5)[0], ExactIndex(keys).search(queries, 5)[0])


@pytest.mark.parametrize("setting", ["tpu", 3, pytest.param("cuda", marks=pytest.mark.skipif(
    torch.cuda.is_available(), reason="a GPU is visible"))])
def test_a_search_device_that_is_none_or_absent_is_a_config_error_naming_the_key(setting):
    with pytest.raises(ConfigError, match="search.device"):
        search_device(section_from(SearchSettings, "search", {"device": setting}))


def test_search_device_auto_is_the_gpu_where_one_is_visible():
    auto = SearchSettings(device="auto")
    assert search_device(auto) == ("cuda" if torch.cuda.is_available() else "cpu")
