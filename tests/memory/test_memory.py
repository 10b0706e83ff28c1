"""The knowledge memory: key sets, the joint search of two indexes, values, and the memory stage's folder."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

from raexmc.errors import DataError
from raexmc.evaluation.evaluator import Evaluator
from raexmc.evaluation.methods import evaluate_retrieval
from raexmc.evaluation.retrievals import Retrievals
from raexmc.memory import keys_values
from raexmc.memory.exact import ExactIndex
from raexmc.memory.indexes import build_memory_indexes, load_joint_search, memory_backend
from raexmc.memory.input_memory import LABELS_FOLDER, InputMemory, MemorySettings, build_input_memory
from raexmc.memory.key_selection import select_keys
from raexmc.memory.keys_values import KEYS_FILE, memory_keys, training_values
from raexmc.memory.merge import JointSearch, RaeRetrieval
from raexmc.memory.persistence import save_index
from raexmc.memory.prototypes import label_prototypes
from raexmc.memory.search import sort_rows
from raexmc.rae.reference import reference_scores
from raexmc.settings import load_settings
from tests.helpers import REPO, brute_top_k, memory_search, rae_on, search_all, unit_rows

N_TRAIN, N_LABELS, N_TEST, TAU = 40, 15, 12, 0.04


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_stacked_rows_are_the_chosen_rows_of_each_part_in_turn(monkeypatch, dtype):
    rng = np.random.default_rng(4)
    inputs, labels = rng.normal(size=(11, 3)).astype(dtype), rng.normal(size=(4, 3)).astype(dtype)
    monkeypatch.setattr(keys_values, "GATHER_ROWS", 4)  # blocks end inside both parts
    keys = keys_values.stack_rows([(inputs, np.array([0, 2, 3, 7, 8, 10])), (labels, None)])
    assert keys.dtype == np.float32
    np.testing.assert_array_equal(keys, np.concatenate([inputs[[0, 2, 3, 7, 8, 10]], labels]).astype(np.float32))


@pytest.mark.parametrize("backend", ["exact", "hnsw"])
def test_key_sets_stack_in_key_id_order_each_indexed_once_and_the_joint_search_merges(embeddings, tmp_path, backend):
    built = build_memory_indexes(embeddings, tmp_path / "index", backend, M=16, ef_construction=100, threads=1)
    assert {name: values["keys"] for name, values in built.items()} == {"inputs": 40, "labels": 15}
    assert sorted(p.name for p in (tmp_path / "index").iterdir()) == ["inputs", "labels"]
    assert memory_backend(tmp_path / "index") == backend
    queries, keys = np.load(embeddings / "test.npy"), memory_keys(embeddings)
    train, labels = np.load(embeddings / "train.npy"), np.load(embeddings / "labels.npy")  # key sets in key-id order
    np.testing.assert_array_equal(keys, np.vstack([train, labels]))
    np.testing.assert_array_equal(memory_keys(embeddings, "labels"), labels)
    np.testing.assert_array_equal(memory_keys(embeddings, "inputs"), train)
    memory = load_joint_search(tmp_path / "index", keys if backend == "exact" else None, ef_search=100)
    for hits, key_set in ((memory.search(queries, 5), keys), *zip(memory.search_parts(queries, 5),
                                                                   (keys[:40], keys[40:]))):
        np.testing.assert_array_equal(hits[0], brute_top_k(queries, key_set, 5)[0])  # each in its own ids


def test_values_are_binary_unless_graded_is_asked_for_and_take_over_a_matrix_handed_to_them():
    Y = sp.csr_matrix(np.array([[1.0, 0.0, 0.5], [0.0, 2.0, 0.0]]))
    np.testing.assert_array_equal(training_values(Y).toarray(), [[1, 0, 1], [0, 1, 0]])
    np.testing.assert_array_equal(training_values(Y, "graded").toarray(), Y.toarray())
    assert Y.data.tolist() == [1.0, 0.5, 2.0]  # the dataset's matrix is left as it was
    # copy=False: a float64 matrix's arrays become the values' (the stages hand over the 0.6 GB Y_train)
    Y = sp.csr_matrix((np.array([1.0, 0.0, 0.5, 2.0]), np.array([0, 1, 2, 1]), np.array([0, 3, 4])), shape=(2, 3))
    values = training_values(Y, copy=False)  # with a stored zero, which the values drop
    np.testing.assert_array_equal(values.toarray(), [[1, 0, 1], [0, 1, 0]])
    assert values.nnz == 3
    assert np.shares_memory(values.data, Y.data) and np.shares_memory(values.indices, Y.indices)
    graded = training_values(sp.csr_matrix(np.array([[0.5, 0.0], [0.0, 3.0]], dtype=np.float32)), "graded",
                             copy=False)
    assert graded.dtype == np.float64 and graded.toarray().tolist() == [[0.5, 0.0], [0.0, 3.0]]


# --- the memory stage's folder -----------------------------------------------------------------

@pytest.fixture
def memory_data(embeddings, tmp_path):
    """The embeddings, the index stage's exact indexes over them, label rows of the inputs and test queries."""
    build_memory_indexes(embeddings, tmp_path / "index", "exact")
    rng = np.random.default_rng(3)
    Y, Y_test = (sp.csr_matrix((rng.random((n, N_LABELS)) < 0.2).astype(np.float64)) for n in (N_TRAIN, N_TEST))
    return embeddings, tmp_path / "index", Y, Y_test


def build(memory_data, folder, keep=1.0, method="kmeans", prior=False, backend="exact", **options):
    embeddings, _, Y, _ = memory_data
    return build_input_memory(np.load(embeddings / "train.npy"), Y, MemorySettings(keep, method, prior, 0), folder,
                              backend, **options)


def searches(memory_data, memory_folder, k=10, k_parts=5, prior_tau=TAU, **options):
    """RAE's keys at b = k_parts from the memory folder, and kNN's and the dual encoder's top-k_parts."""
    embeddings, index, _, _ = memory_data
    joint, other_b, inputs, labels = memory_search(InputMemory(memory_folder), load_joint_search(
        index, memory_keys(embeddings)), np.load(embeddings / "test.npy"), k, k_parts, prior_tau, 100, **options)
    return joint, inputs, labels, other_b


def metrics(memory_data, memory_folder):
    _, _, Y, Y_test = memory_data
    memory = InputMemory(memory_folder)
    joint, inputs, labels, other_b = searches(memory_data, memory_folder)
    assert other_b == {}, "the joint retrieval's smaller b are its prefixes"
    evaluator = Evaluator(Y, Y_test, sp.csr_matrix(Y_test.shape), (0.55, 1.5),
                          None if memory.full else memory.values(Y))
    return evaluate_retrieval(Retrievals(joint, labels, inputs).rows, evaluator, rae_on(evaluator, 0.5, TAU, 5),
                              [0.3], [2])


def test_keep_one_records_the_index_stage_inputs_and_copies_nothing(memory_data, tmp_path):
    """The project's memory section at keep 1 (compression none), with the prior on: memory.json alone, saying so."""
    embeddings, index, Y, _ = memory_data
    section = load_settings(REPO / "params.yaml").memory.model_copy(update={"keep": 1.0})
    settings = dataclasses.replace(MemorySettings.from_section(section, "hnsw"), prior=True)
    meta = build_input_memory(np.load(embeddings / "train.npy"), Y, settings, tmp_path / "memory", "hnsw",
                              labels=np.load(embeddings / "labels.npy"))
    assert sorted(p.name for p in (tmp_path / "memory").iterdir()) == ["memory.json"]
    assert meta == json.loads((tmp_path / "memory/memory.json").read_text())
    assert (meta["index"], meta["input_keys"], meta["num_inputs"], meta["compression"]) == (
        "index/inputs", N_TRAIN, N_TRAIN, "none")
    reference = search_all(load_joint_search(index, memory_keys(embeddings)), np.load(embeddings / "test.npy"), 10, 5)
    for got, expected in zip(searches(memory_data, tmp_path / "memory"), reference):  # the prior is never applied
        np.testing.assert_array_equal(got[0], expected[0])                          # to a full memory
        np.testing.assert_array_equal(got[1], expected[1])


def test_a_selected_memory_of_every_input_scores_as_the_full_one(memory_data, tmp_path):
    """A memory folder holding its own index over all 40 inputs, in order, with values Y: every metric of
    every method equals the full memory's, so the selected path adds nothing of its own."""
    embeddings, _, Y, _ = memory_data
    build(memory_data, tmp_path / "full", method="random")
    own, keys = tmp_path / "own", np.load(embeddings / "train.npy")
    save_index(ExactIndex(keys), own / "inputs")
    np.save(own / KEYS_FILE, keys)
    np.save(own / "counts.npy", np.ones(N_TRAIN, np.int64))
    sp.save_npz(own / "values.npz", Y)
    (own / "memory.json").write_text(json.dumps({"keep": 1.0, "method": "random", "prior": True, "seed": 0,
                                                 "num_inputs": N_TRAIN, "input_keys": N_TRAIN, "index": "inputs"}))
    got, expected = metrics(memory_data, own), metrics(memory_data, tmp_path / "full")
    for part in ("methods", "lambda_sweep", "b_sweep"):
        assert got[part] == expected[part]
    for method, arrays in expected["per_instance"].items():
        for name, values in arrays.items():
            np.testing.assert_array_equal(got["per_instance"][method][name], values)


@pytest.mark.parametrize("backend", ["exact", "hnsw"])
def test_a_smaller_memory_is_searched_beside_the_labels(memory_data, tmp_path, backend):
    """keep 0.25 of 40 inputs: 10 merged keys (joint ids 0..9, labels 10..24); the joint top-k is the exact
    top-k over [those keys; labels]; kNN still searches all 40 inputs and the dual encoder the labels."""
    embeddings, _, Y, _ = memory_data
    meta = build(memory_data, tmp_path / "memory", 0.25, backend=backend, M=16, ef_construction=100, threads=1)
    memory = InputMemory(tmp_path / "memory")
    assert meta["input_keys"] == 10 and not memory.full and memory.log_counts() is None
    assert memory.values(Y).shape == (10, N_LABELS)
    joint, inputs, labels, _ = searches(memory_data, tmp_path / "memory", k=25)
    queries, train, label_keys = (np.load(embeddings / f"{split}.npy") for split in ("test", "train", "labels"))
    if backend == "exact":
        stacked = np.vstack([np.load(tmp_path / "memory" / KEYS_FILE), label_keys])
        np.testing.assert_array_equal(joint[0], ExactIndex(stacked).search(queries, 25)[0])
    assert ((joint[0] >= 0) & (joint[0] < 25)).all(), "every key is one of the 10 kept and 15 labels"
    np.testing.assert_array_equal(inputs[0], ExactIndex(train).search(queries, 5)[0])
    np.testing.assert_array_equal(labels[0], ExactIndex(label_keys).search(queries, 5)[0])


def test_the_prior_is_added_at_the_chosen_tau(memory_data, tmp_path):
    """With the prior, each input key's similarity gains τ·log n (n its member count), rows re-sorted."""
    build(memory_data, tmp_path / "plain", 0.25)
    build(memory_data, tmp_path / "prior", 0.25, prior=True)
    counts = np.load(tmp_path / "prior/counts.npy")
    assert counts.sum() == N_TRAIN and (counts > 1).any()
    plain_ids, plain_sims = searches(memory_data, tmp_path / "plain", k=25)[0]
    ids, sims = searches(memory_data, tmp_path / "prior", k=25, prior_tau=0.1)[0]
    boost = np.where(plain_ids < 10, 0.1 * np.log(counts[np.minimum(plain_ids, 9)]), 0.0)
    expected_ids, expected_sims = sort_rows(plain_ids, (plain_sims + boost).astype(np.float32))
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_allclose(sims, expected_sims, rtol=0, atol=1e-6)


def test_keep_zero_is_the_labels_alone_and_a_folder_without_memory_json_one_data_error(memory_data, tmp_path):
    build(memory_data, tmp_path / "memory", 0.0, backend="hnsw")
    joint, _, labels, _ = searches(memory_data, tmp_path / "memory", k=5)
    np.testing.assert_array_equal(joint[0], labels[0])  # label j is joint id 0 + j: no input keys before it
    assert InputMemory(tmp_path / "memory").values(memory_data[2]).shape == (0, N_LABELS)
    (tmp_path / "no memory").mkdir()
    with pytest.raises(DataError, match="memory stage"):  # a folder without memory.json
        InputMemory(tmp_path / "no memory")


@pytest.mark.parametrize("keep", [1.0, 0.5])
@pytest.mark.parametrize(("own", "sizes", "ef"), [
    ({"method": "kmeans", "compression": "sq8-m12"}, (5, 600, 200, 50, 0.02), (100, 64)),
    ({"method": "random", "prototypes": 0.5}, (7, 300, 100, 40, 0.03), (200, 200))], ids=["sq8", "prototypes"])
def test_a_memory_searches_its_own_labels_index_and_the_baselines_the_index_stage_s(tmp_path, keep, own, sizes, ef):
    """16-dim unit keys. sq8 keys in faiss graphs of degree 12 (600 inputs, 200 labels): the joint top-20 of the
    memory's own two indexes holds at least 90% of the exact top-20 over [kept keys; labels]; label prototypes at
    α 0.5 (300 inputs, 100 labels; HNSW at these sizes is exact here): RAE's joint top-20 is the exact top-20 over
    [kept keys; prototypes] (the kept keys: the same seeded selection, float32). kNN and the dual encoder keep the
    index stage's indexes."""
    seed, n_inputs, n_labels, n_queries, density = sizes
    rng = np.random.default_rng(seed)
    train, labels, queries = (unit_rows(rng, n, 16) for n in (n_inputs, n_labels, n_queries))
    Y = training_values(sp.csr_matrix((rng.random((n_inputs, n_labels)) < density).astype(np.float64)))
    baselines = JointSearch(ExactIndex(train), ExactIndex(labels))
    meta = build_input_memory(train, Y, MemorySettings(keep=keep, prior=False, seed=0, **own), tmp_path / "memory",
                              "hnsw", labels=labels, M=32, ef_construction=ef[0], threads=1)
    memory = InputMemory(tmp_path / "memory")
    _, at_b, inputs, dual = memory_search(memory, baselines, queries, 20, 5, TAU, ef_search=ef[1], other_b=(20,))
    joint = at_b[20]  # RAE's joint top-20; the baselines' top-5
    kept = train if keep == 1.0 else select_keys(train, Y, keep, own["method"], 0).keys
    label_keys = label_prototypes(train, Y, labels, 0.5) if "prototypes" in own else labels
    exact_ids, exact_sims = ExactIndex(np.vstack([kept, label_keys])).search(queries, 20)
    if "compression" in own:
        assert meta["compression"] == memory.compression == "sq8-m12"
        assert sorted(p.name for p in (tmp_path / "memory").iterdir()) == sorted(
            ["memory.json", "inputs", "labels", *(["values.npz", "counts.npy"] if keep < 1 else [])])
        recall = np.mean([len(set(got) & set(want)) / 20 for got, want in zip(joint[0], exact_ids)])
        assert recall >= 0.9, recall
        assert {memory.indexes(baselines, 64).inputs.backend, memory.indexes(baselines, 64).labels.backend} == {"faiss"}
    else:
        assert meta["prototypes"] == 0.5 and (tmp_path / "memory" / LABELS_FOLDER).is_dir()
        np.testing.assert_array_equal(joint[0], exact_ids)
        np.testing.assert_allclose(joint[1], exact_sims, atol=1e-5)
    np.testing.assert_array_equal(inputs[0], ExactIndex(train).search(queries, 5)[0])
    np.testing.assert_array_equal(dual[0], ExactIndex(labels).search(queries, 5)[0])


@pytest.mark.parametrize("edits, key, named", [
    ({"  keep: auto ": "  keep: 1.0 ", "  compression: none ": "  compression: zip9 "}, "memory.compression", "zip9"),
    ({"  keep: auto ": "  keep: 1.0 ", "  compression: none ": "  compression: sq8 ",
      "  backend: auto ": "  backend: exact "}, "memory.compression", "needs an hnsw index"),
    ({"  relevance: binary ": "  relevance: graded2 "}, "infer.relevance", "graded2")])
def test_the_memory_stage_refuses_what_it_cannot_build_in_one_line(tmp_path, edits, key, named):
    """A bad compression or relevance (at keep 1 too) is refused before the stage reads anything (there is no
    dataset here), naming the parameters file the stage was given."""
    params = (REPO / "params.yaml").read_text()
    for old, new in edits.items():
        assert old in params
        params = params.replace(old, new)
    experiment = tmp_path / "experiment.yaml"
    experiment.write_text(params)
    (tmp_path / "emb").mkdir()
    for split in ("train", "labels"):  # what index.backend auto counts (only the arrays' headers are read)
        np.save(tmp_path / "emb" / f"{split}.npy", np.zeros((3, 4), dtype=np.float32))
    proc = subprocess.run([sys.executable, str(REPO / "stages/memory.py"), "--dataset", str(tmp_path / "data"),
                           "--embeddings", str(tmp_path / "emb"), "--out", str(tmp_path / "memory"),
                           "--params", str(experiment)], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"ConfigError: {experiment}:{key}: ")
    assert named in last and not (tmp_path / "memory").exists()


def test_a_kmeans_labels_memory_selects_with_the_labels_keys(memory_data, tmp_path):
    """kmeans-labels needs the labels' keys below keep 1 (and says so), and the memory holds what
    select_keys gives with them."""
    embeddings, _, Y, _ = memory_data
    train, labels = np.load(embeddings / "train.npy"), np.load(embeddings / "labels.npy")
    assert MemorySettings(0.25, "kmeans-labels", False, 0).needs_labels
    assert not MemorySettings(1.0, "kmeans-labels", False, 0).needs_labels
    with pytest.raises(ValueError, match="labels' keys"):
        build(memory_data, tmp_path / "without", 0.25, "kmeans-labels")
    build(memory_data, tmp_path / "memory", 0.25, "kmeans-labels", labels=labels)
    expected = select_keys(train, Y, 0.25, "kmeans-labels", 0, labels=labels)
    np.testing.assert_array_equal(np.load(tmp_path / "memory" / KEYS_FILE), expected.keys)
    np.testing.assert_array_equal(InputMemory(tmp_path / "memory").values(Y).toarray(), expected.values.toarray())


def test_a_split_retrieval_is_evaluated_at_each_b_with_its_own_share(memory_data, tmp_path):
    """infer.retrieval split: RAE at b = 5 and the b sweep's b = 2 each score their own split (3 + 2; 1 + 1), not a
    prefix of another b's keys: their metrics are the dense brute-force scores'."""
    embeddings, _, Y, Y_test = memory_data
    build(memory_data, tmp_path / "memory")
    joint, inputs, labels, other_b = searches(memory_data, tmp_path / "memory", retrieval=RaeRetrieval("split", 0.5),
                                              other_b=(2,))
    evaluator = Evaluator(Y, Y_test, sp.csr_matrix(Y_test.shape), (0.55, 1.5))
    result = evaluate_retrieval(Retrievals(joint, labels, inputs, other_b).rows, evaluator,
                                rae_on(evaluator, 0.5, TAU, 5), [0.5], [2, 5])
    queries, X, Z = (np.load(embeddings / f"{split}.npy") for split in ("test", "train", "labels"))
    for b, num_z, row in ((5, 3, result["methods"]["rae"]), (2, 1, result["b_sweep"][0]), (5, 3, result["b_sweep"][1])):
        dense = reference_scores(queries, X, Z, Y.toarray(), 0.5, TAU, b, num_z / b)
        expected = evaluator.summary(evaluator.rank(len(queries), lambda rows, d=dense: sp.csr_matrix(d[rows])))[0]
        assert {k: row[k] for k in ("P@1", "P@5", "R@10")} == {k: expected[k] for k in ("P@1", "P@5", "R@10")}, b
