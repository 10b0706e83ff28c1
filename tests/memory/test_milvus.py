"""The Milvus backend on Milvus Lite (in-process, no network): the top-k ids of exact search (ties by id) and its
similarities within 1e-5, through a save and a reopening; each bad reference, collection or Lite folder one
DataError naming the file and key (index.uri or the collection)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

from raexmc.errors import ConfigError, DataError  # noqa: E402
from raexmc.memory import milvus  # noqa: E402
from raexmc.memory.indexes import make_index  # noqa: E402
from raexmc.memory.persistence import load_index, save_index  # noqa: E402
from tests.helpers import brute_top_k, free_port, garble_milvus_lite, json_edited  # noqa: E402


@pytest.fixture(scope="module")
def keys_queries():
    rng = np.random.default_rng(7)
    keys = rng.standard_normal((300, 12)).astype(np.float32)
    keys /= np.linalg.norm(keys, axis=1, keepdims=True)
    keys[[4, 40, 140]] = keys[9]  # ties: the smaller id first
    queries = rng.standard_normal((40, 12)).astype(np.float32)
    queries[0] = keys[9]
    return keys, queries


@pytest.fixture(scope="module")
def saved(tmp_path_factory, keys_queries):
    folder = tmp_path_factory.mktemp("milvus") / "labels"
    # HNSW with a beam of more than every key reaches them all: exact
    save_index(make_index("milvus", keys_queries[0], M=8, ef_construction=64, ef_search=400, progress=False), folder)
    return folder


def test_a_reopened_lite_index_answers_exact_search(saved, keys_queries):
    keys, queries = keys_queries
    index = load_index(saved, ef_search=400)
    ids, sims = index.search(queries, 25)
    expected_ids, expected_sims = brute_top_k(queries, keys, 25)
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_allclose(sims, expected_sims, atol=1e-5, rtol=0)
    assert list(ids[0, :4]) == [4, 9, 40, 140]
    assert (index.count, index.dim, index.search(queries[:2], 400)[0][0, 300]) == (300, 12, -1)  # padded past n
    meta = json.loads((saved / "meta.json").read_text())
    assert meta["sha256"] == milvus.keys_hash(keys) and meta["uri"] == "" and (saved / "milvus.db").is_dir()


def broken(saved, tmp_path, name, edit):
    folder = tmp_path / name
    shutil.copytree(saved, folder)
    edit(folder)
    return folder


@pytest.mark.parametrize(("name", "edit", "says"), [
    ("missing-collection", json_edited("meta.json", collection="raexmc_gone"), "collection raexmc_gone not found"),
    ("other-count", json_edited("meta.json", count=299), "holds 300 keys of dimension 12"),
    ("other-dim", json_edited("meta.json", dim=16), "holds 300 keys of dimension 12"),
    ("other-hash", json_edited("meta.json", sha256="0" * 64), "sha256 " + "0" * 64),
    ("corrupt-lite", garble_milvus_lite, "milvus.db"),
    ("no-lite", lambda folder: shutil.rmtree(folder / "milvus.db"), "milvus.db is missing"),
])
def test_a_bad_index_folder_is_one_error_naming_it(saved, tmp_path, name, edit, says):
    folder = broken(saved, tmp_path, name, edit)
    with pytest.raises(DataError) as caught:
        load_index(folder)
    assert str(folder) in str(caught.value) and says in str(caught.value) and "\n" not in str(caught.value)


def test_an_unreachable_server_is_one_error_naming_the_uri_after_bounded_retries(saved, tmp_path, monkeypatch):
    monkeypatch.setattr(milvus, "CONNECT_TIMEOUT_S", 0.5)
    uri = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(DataError, match=f"index.uri: cannot open Milvus at {uri} \\(3 tries"):
        make_index("milvus", np.eye(3, dtype=np.float32), uri=uri, progress=False)
    folder = broken(saved, tmp_path, "server", json_edited("meta.json", uri=uri))
    with pytest.raises(DataError, match=f"{folder}/meta.json|{folder}:uri: cannot open Milvus at {uri}"):
        load_index(folder)
    with pytest.raises(ConfigError, match="index.uri: must be milvus.db"):
        make_index("milvus", np.eye(3, dtype=np.float32), uri="/elsewhere/lite", progress=False)
    monkeypatch.delenv("NO_SUCH_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="NO_SUCH_TOKEN is not set"):
        make_index("milvus", np.eye(3, dtype=np.float32), uri=uri, token_env="NO_SUCH_TOKEN", progress=False)
