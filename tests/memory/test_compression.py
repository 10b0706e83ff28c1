"""Compressed memory indexes (faiss HNSW over quantised keys): names, recall against exact search,
score error, persistence and bytes per key, all on real faiss."""

from __future__ import annotations

import json

import numpy as np
import pytest

from raexmc.errors import ConfigError, DataError
from raexmc.evaluation.metrics import recall_at_k
from raexmc.memory.compression import Compression, parse_compression
from raexmc.memory.exact import ExactIndex
from raexmc.memory.indexes import build_memory_indexes, load_joint_search, make_index, memory_backend
from raexmc.memory.persistence import index_bytes, load_index, save_index, saved_meta

N_KEYS, DIM, B = 3000, 64, 50


def unit(rows: np.ndarray) -> np.ndarray:
    rows = rows.astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def clustered():
    """Seeded keys and queries around 30 shared centres, like encoder embeddings of related texts."""
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((30, DIM))
    keys = unit(centres[rng.integers(0, 30, N_KEYS)] + 0.5 * rng.standard_normal((N_KEYS, DIM)))
    queries = unit(centres[rng.integers(0, 30, 200)] + 0.5 * rng.standard_normal((200, DIM)))
    return keys, queries


def build(keys: np.ndarray, name: str, M: int = 16):
    return make_index("hnsw", keys, M=M, ef_construction=100, ef_search=100, threads=1, progress=False,
                      compression=name)


@pytest.mark.parametrize("name, want", [
    ("sq8", Compression("sq8", "sq8")),
    ("fp16-m12", Compression("fp16-m12", "fp16", M=12)),
    ("sq4-m8", Compression("sq4-m8", "sq4", M=8)),
])
def test_names_parse(name, want):
    assert parse_compression(name) == want
    assert parse_compression("none") is None


@pytest.mark.parametrize("name", ["int8", "sq8-m1", "pca96-sq8", "pca-sq8", "sq8-m", "SQ8", "pq16", " sq8", ""])
def test_unknown_names_are_refused_in_one_line(name):
    with pytest.raises(ConfigError) as caught:
        parse_compression(name)
    line = str(caught.value)
    assert "\n" not in line and line.startswith("ConfigError: params.yaml:memory.compression: ")
    assert repr(name) in line


@pytest.mark.parametrize("name, min_recall, levels", [("fp16", 0.97, None), ("sq8", 0.95, 255)])
def test_recall_and_scores_within_one_quantisation_step(clustered, name, min_recall, levels):
    """Recall against exact search; each returned score is q·k up to what the codec rounds: at most one step of
    the key's per-dimension range (max - min over the keys, split into `levels` steps) a dimension, weighted by
    |q_i|; fp16 keeps 11 significant bits, so at most 2^-11 of |q|·|k| = 1."""
    keys, queries = clustered
    ids, sims = build(keys, name).search(queries, B)
    assert recall_at_k(ids, ExactIndex(keys).search(queries, B)[0]) >= min_recall
    true = np.einsum("qd,qkd->qk", queries, keys[ids])
    step = (keys.max(axis=0) - keys.min(axis=0)) / levels if levels else None
    bound = np.full(len(queries), 2.0 ** -11) if step is None else np.abs(queries) @ step
    assert (np.abs(sims - true) <= bound[:, None]).all()


def test_sq4_scores_err_less_than_rounding_to_16_levels_of_min_to_max(clustered):
    """sq4 fits each dimension's range to the keys (outliers clipped), so no per-score bound holds; on
    average it must do better than min..max in 15 steps, whose rounding errors (uniform, +-step/2) give a
    score error of root-mean-square sqrt(sum_i q_i^2 step_i^2 / 12) per query."""
    keys, queries = clustered
    ids, sims = build(keys, "sq4").search(queries, B)
    error = np.abs(sims - np.einsum("qd,qkd->qk", queries, keys[ids]))
    step = (keys.max(axis=0) - keys.min(axis=0)) / 15
    rounding_rms = np.sqrt((queries ** 2) @ (step ** 2) / 12)
    assert np.sqrt((error ** 2).mean()) < rounding_rms.mean()


@pytest.mark.parametrize("name, M, code_bytes", [("sq8", 16, DIM), ("sq4-m8", 8, DIM // 2), ("fp16", 16, DIM * 2)])
def test_bytes_per_key_within_the_hand_count(clustered, tmp_path, name, M, code_bytes):
    """A key costs its code, 2M level-0 links of 4 bytes, an 8-byte offset and a 4-byte level, and on
    average under 8 bytes of upper-level links (1/M of the keys reach level 1, M links each); the file
    adds a header."""
    keys, _ = clustered
    save_index(build(keys, name), tmp_path / "index")
    per_key = code_bytes + 2 * M * 4 + 8 + 4 + 8
    assert index_bytes(tmp_path / "index") <= N_KEYS * per_key + 4096
    assert index_bytes(tmp_path / "index") >= N_KEYS * (code_bytes + 2 * M * 4)


def test_what_cannot_be_built_is_refused(clustered):
    with pytest.raises(ConfigError, match="needs an hnsw index"):
        make_index("exact", clustered[0], M=16, ef_construction=100, threads=1, progress=False, compression="sq8")


def test_a_compressed_memory_serves_the_joint_search(clustered, tmp_path):
    """The index stage's folder with compression: one faiss index per key set, reopened without keys and
    merged as hnswlib's are; fp16 scores are q·k to 2^-11, so the joint top-b has the exact scores."""
    keys, queries = clustered
    embeddings = tmp_path / "embeddings"
    embeddings.mkdir()
    np.save(embeddings / "train.npy", keys[:2000])
    np.save(embeddings / "labels.npy", keys[2000:])
    built = build_memory_indexes(embeddings, tmp_path / "index", "hnsw", M=16, ef_construction=100, threads=1,
                                 progress=False, compression="fp16")
    assert {name: values["keys"] for name, values in built.items()} == {"inputs": 2000, "labels": 1000}
    assert memory_backend(tmp_path / "index") == "faiss"
    ids, sims = load_joint_search(tmp_path / "index", ef_search=100, threads=1).search(queries, B)
    assert recall_at_k(ids, ExactIndex(keys).search(queries, B)[0]) >= 0.97
    np.testing.assert_allclose(sims, np.einsum("qd,qkd->qk", queries, keys[ids]), atol=2.0 ** -11)


def test_load_refuses_a_damaged_index(clustered, tmp_path):
    """A garbled faiss.bin, or a meta.json naming a compression this version does not read."""
    for damage in ("faiss.bin", "none", "sq3", 8):
        folder = save_index(build(clustered[0][:200], "sq8"), tmp_path / str(damage))
        if damage == "faiss.bin":
            (folder / "faiss.bin").write_bytes(b"not an index")
        else:
            (folder / "meta.json").write_text(json.dumps({**saved_meta(folder), "compression": damage}))
        says = "cannot load faiss.bin" if damage == "faiss.bin" else "not a compression this"
        with pytest.raises(DataError, match=says):
            load_index(folder)
