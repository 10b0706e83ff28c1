"""Evaluation: every method's metrics agree with a dense brute force written out per query, and the
baselines are their own searches (input keys crowding the joint top-b do not change the dual encoder)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from oracle import brute_force
from raexmc.evaluation.evaluator import Evaluator
from raexmc.evaluation.methods import evaluate_retrieval, method_scorers, segment_rows
from raexmc.evaluation.retrievals import BlockSearch, Retrievals
from raexmc.evaluation.significance import compare_runs
from tests.helpers import dense_top_b_softmax, rae_on
from tune_helpers import exact_search

N_LABELS, N_TEST, DIM = 25, 20, 8


def _unit(rng, n):
    v = rng.normal(size=(n, DIM))
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def make_problem(n_train: int, crowd: bool, seed: int = 0):
    """Labels and test queries are fixed by `seed`; training inputs are random, or (crowd) near-copies
    of the test queries, so they fill the joint top-b."""
    rng = np.random.default_rng(seed)
    Z, Q = _unit(rng, N_LABELS), _unit(rng, N_TEST)
    Y_test = sp.csr_matrix((rng.random((N_TEST, N_LABELS)) < 0.15).astype(np.float64))
    exclude = sp.csr_matrix((np.ones(N_TEST), (np.arange(N_TEST), np.arange(N_TEST) % N_LABELS)),
                            shape=(N_TEST, N_LABELS))
    train_rng = np.random.default_rng([seed, n_train])
    if crowd:
        X = Q[train_rng.integers(0, N_TEST, n_train)] + 0.01 * train_rng.normal(size=(n_train, DIM))
        X /= np.linalg.norm(X, axis=1, keepdims=True)
    else:
        X = _unit(train_rng, n_train)
    Y_train = sp.csr_matrix((train_rng.random((n_train, N_LABELS)) < 0.1).astype(np.float64))
    return {"X": X, "Z": Z, "Q": Q, "Y_train": Y_train, "Y_test": Y_test, "exclude": exclude}


def retrievals_of(m, width):
    return Retrievals(joint=exact_search(m["Q"], np.vstack([m["X"], m["Z"]]), width),
                      labels=exact_search(m["Q"], m["Z"], width), inputs=exact_search(m["Q"], m["X"], width))


def dense_scores(m, method, lam, tau, b):
    Y = m["Y_train"].toarray()
    if method == "dual_encoder":
        return dense_top_b_softmax(m["Q"] @ m["Z"].T, b, tau)
    if method == "knn":
        return dense_top_b_softmax(m["Q"] @ m["X"].T, b, tau) @ Y
    if method == "ova_knn":
        return lam * dense_scores(m, "knn", lam, tau, b) + (1 - lam) * dense_scores(m, "dual_encoder", lam, tau, b)
    P = dense_top_b_softmax(m["Q"] @ np.vstack([m["X"], m["Z"]]).T, b, tau)
    return P @ np.vstack([lam * Y, (1 - lam) * np.eye(N_LABELS)])


def loop_metrics(scores, m):
    """P@1, P@5, R@100 (percent) of the oracle's brute force, a label scored 0 left unranked."""
    def rows(matrix):
        return [set(matrix[i].indices.tolist()) for i in range(matrix.shape[0])]
    filtered = {(int(i), int(label)) for i, label in zip(*m["exclude"].nonzero())}
    table, _ = brute_force(rows(m["Y_train"]), rows(m["Y_test"]), filtered, sp.csr_matrix(scores), 0.55, 1.5)
    return {name: table[name] for name in ("P@1", "P@5", "R@100")}


SWEEPS = ([0.0, 0.3, 1.0], [5, 12])  # λ and b sweeps


def evaluator_of(m):
    return Evaluator(m["Y_train"], m["Y_test"], m["exclude"], (0.55, 1.5))


@pytest.mark.parametrize("crowd", [False, True])
def test_every_method_matches_a_dense_brute_force(crowd):
    m = make_problem(60, crowd)
    result = evaluate_retrieval(retrievals_of(m, 40).rows, evaluator_of(m), rae_on(evaluator_of(m), 0.3, 0.1, 12),
                                *SWEEPS, with_ova_knn=True)
    # the dual encoder ranks every label of its own search (40 deep), whatever RAE's b
    for method, b in (("rae", 12), ("dual_encoder", 40), ("knn", 12), ("ova_knn", 12)):
        expected = loop_metrics(dense_scores(m, method, 0.3, 0.1, b), m)
        assert {k: result["methods"][method][k] for k in expected} == expected, method
    # The λ sweep is RAE on the joint retrieval; its endpoints are not the baselines.
    sweep = {row["lambda"]: row for row in result["lambda_sweep"]}
    for lam in (0.0, 1.0):
        assert sweep[lam]["P@1"] == loop_metrics(dense_scores(m, "rae", lam, 0.1, 12), m)["P@1"]
    assert result["b_sweep"][0]["P@5"] == loop_metrics(dense_scores(m, "rae", 0.3, 0.1, 5), m)["P@5"]
    # Share of training inputs among the joint top-5, counted by hand.
    joint_top5 = np.argsort(-(m["Q"] @ np.vstack([m["X"], m["Z"]]).T).astype(np.float32), axis=1, kind="stable")[:, :5]
    assert result["b_sweep"][0]["train_key_share"] == round(100 * float(np.mean(joint_top5 < 60)), 2)
    assert {r["segment"] for r in segment_rows(result["methods"])} <= {"head", "torso", "tail", "xtail", "unseen"}


def test_the_dual_encoder_does_not_depend_on_how_many_inputs_crowd_the_joint_top_b():
    few, many = make_problem(5, crowd=True), make_problem(500, crowd=True)
    assert np.array_equal(few["Z"], many["Z"]) and np.array_equal(few["Q"], many["Q"])
    got = {n: evaluate_retrieval(retrievals_of(m, 10).rows, evaluator_of(m), rae_on(evaluator_of(m), 0.5, 0.04, 10)
                                 )["methods"]
           for n, m in (("few", few), ("many", many))}
    assert got["few"]["dual_encoder"]["R@100"] == got["many"]["dual_encoder"]["R@100"]
    assert got["many"]["dual_encoder"]["R@100"] == loop_metrics(dense_scores(many, "dual_encoder", 0, 0.04, 10),
                                                                many)["R@100"]
    # ...while RAE at λ=0 on the joint top-10 sees almost no label key once 500 inputs crowd it.
    crowded = retrievals_of(many, 10).joint[0]
    assert (crowded >= 500).mean() < 0.2


def test_significance_report_compares_rae_with_both_baselines():
    m = make_problem(60, crowd=False)
    result = evaluate_retrieval(retrievals_of(m, 30).rows, evaluator_of(m),
                                rae_on(evaluator_of(m), 0.5, 0.1, 30))
    flat = {f"{m}/{k}": v for m, arrays in result["per_instance"].items() for k, v in arrays.items()}
    report = compare_runs(flat, ["P@1", "R@100"], other=flat)
    assert set(report) == {"rae_vs_dual_encoder", "rae_vs_knn", "rae_vs_other", "dual_encoder_vs_other",
                           "knn_vs_other"}
    assert report["rae_vs_knn"]["P@1"]["mean_a"] == pytest.approx(result["methods"]["rae"]["P@1"], abs=0.01)
    assert report["rae_vs_dual_encoder"]["P@1"]["mean_b"] == pytest.approx(result["methods"]["dual_encoder"]["P@1"],
                                                                          abs=0.01)
    assert report["rae_vs_other"]["P@1"]["p_value"] == 1.0  # identical runs


def assert_same_results(got, expected):
    """Every summary, sweep row and per-query value of two evaluate_retrieval results."""
    for key in ("methods", "lambda_sweep", "b_sweep"):
        assert got[key] == expected[key], key
    for method, arrays in expected["per_instance"].items():
        assert arrays.keys() == got["per_instance"][method].keys()
        for name, values in arrays.items():
            np.testing.assert_array_equal(got["per_instance"][method][name], values, err_msg=f"{method}/{name}")


@pytest.mark.parametrize("chunk, block, workers", [(1, 1, 1), (7, 4, 1), (13, 8, 1), (50, 16, 1), (6, 40, 3)])
def test_chunks_of_queries_and_workers_give_the_numbers_of_one_chunk(chunk, block, workers):
    """Every summary, sweep row and per-query value, whatever the chunks (20 queries; 7 and 13 do not divide
    it), the aligned search blocks they are served from, and the threads that score and rank a chunk's rankings
    side by side (each ranking's tally still takes its chunks in order)."""
    m = make_problem(60, crowd=False)
    rae, retrievals, searched = rae_on(evaluator_of(m), 0.3, 0.1, 12), retrievals_of(m, 40), []

    def search(rows):
        searched.append((rows.start, rows.stop))
        return retrievals.rows(rows)

    whole = evaluate_retrieval(retrievals.rows, evaluator_of(m), rae, *SWEEPS, with_ova_knn=True, chunk=N_TEST)
    chunked = evaluate_retrieval(BlockSearch(search, block, N_TEST), evaluator_of(m), rae, *SWEEPS, with_ova_knn=True,
                                 chunk=chunk, workers=workers)
    assert searched == [(start, min(start + block, N_TEST)) for start in range(0, N_TEST, block)]
    assert_same_results(chunked, whole)
    # one chunk is the evaluator's whole-set summary of the same ranking
    ranked = evaluator_of(m).rank(N_TEST, method_scorers(retrievals, m["Y_train"], 0.3, 0.1, 12)["knn"])
    summary, per_instance = evaluator_of(m).summary(ranked)
    assert summary == whole["methods"]["knn"]
    np.testing.assert_array_equal(per_instance["PSP@5"], whole["per_instance"]["knn"]["PSP@5"])
    with pytest.raises(ValueError, match="workers"):
        evaluate_retrieval(retrievals.rows, evaluator_of(m), rae, workers=0)


def test_a_hit_at_rank_100_counts_in_r_at_100():
    """One query, 120 labels scored 120, 119, ..., 1 (label l ranked l + 1st), its one positive label 99: ranked
    100th, so by the definitions R@100 = 1/1 (100 %), R@10 = P@1 = 0. Ranked 99 deep it would read R@100 = 0."""
    scores = sp.csr_matrix(np.arange(120, 0, -1, dtype=np.float64)[None])
    truth = sp.csr_matrix(([1.0], ([0], [99])), shape=(1, 120))
    evaluator = Evaluator(sp.csr_matrix((4, 120)), truth, sp.csr_matrix((1, 120)), (0.55, 1.5))
    summary, _ = evaluator.summary(evaluator.rank(1, lambda rows: scores[rows]))
    assert (summary["R@100"], summary["R@10"], summary["P@1"]) == (100.0, 0.0, 0.0)


def test_the_train_key_share_counts_the_memorys_input_keys_not_y_trains():
    """A memory keeping 30 of the 60 training inputs (keep 0.5): joint ids 0..29 are its input keys, 30..54 labels.
    Counted against Y_train's 60 rows every key would read as an input key (100 %)."""
    m = make_problem(60, crowd=False)
    kept = np.vstack([m["X"][:30], m["Z"]])
    found = Retrievals(joint=exact_search(m["Q"], kept, 12), labels=exact_search(m["Q"], m["Z"], 12),
                       inputs=exact_search(m["Q"], m["X"], 12))
    evaluator = Evaluator(m["Y_train"], m["Y_test"], m["exclude"], (0.55, 1.5), memory_values=m["Y_train"][:30])
    result = evaluate_retrieval(found.rows, evaluator, rae_on(evaluator, 0.3, 0.1, 5), b_sweep=[5])
    top5 = np.argsort(-(m["Q"] @ kept.T).astype(np.float32), axis=1, kind="stable")[:, :5]
    expected = round(100 * float(np.mean(top5 < 30)), 2)
    assert 0 < expected < 100 and result["b_sweep"][0]["train_key_share"] == expected


def test_an_empty_test_set_gives_nan_metrics():
    """No query: every mean is of nothing (NaN) and every segment's macro-F1 has no label, not a KeyError."""
    m = make_problem(60, crowd=False)
    evaluator = Evaluator(m["Y_train"], m["Y_test"][:0], m["exclude"][:0], (0.55, 1.5))
    result = evaluate_retrieval(retrievals_of(m, 40).rows, evaluator, rae_on(evaluator, 0.3, 0.1, 12))
    for method in ("rae", "dual_encoder", "knn"):
        summary = result["methods"][method]
        assert all(np.isnan(value) for name, value in summary.items() if name != "macro-F1@5"), method
        assert set(summary["macro-F1@5"].values()) == {None}
