"""Evaluation from one retrieval: the methods and sweeps agree with direct computation."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from raexmc.evaluation import EvalSettings, Evaluator, evaluate_retrieval, segment_rows
from raexmc.index import ExactIndex
from raexmc.metrics import per_instance_metrics, propensities, remove_pairs, summarize, top_k
from raexmc.predict import rae_scores
from raexmc.significance import compare_runs


@pytest.fixture
def problem():
    rng = np.random.default_rng(0)
    n_train, n_labels, n_test, dim = 60, 25, 20, 8
    Y_train = sp.csr_matrix((rng.random((n_train, n_labels)) < 0.1).astype(np.float32))
    Y_test = sp.csr_matrix((rng.random((n_test, n_labels)) < 0.1).astype(np.float32))
    exclude = sp.csr_matrix(([True] * n_test, (np.arange(n_test), np.arange(n_test) % n_labels)),
                            shape=(n_test, n_labels))
    def unit(n):
        v = rng.normal(size=(n, dim)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)
    keys, queries = np.vstack([unit(n_train), unit(n_labels)]), unit(n_test)
    ids, sims = ExactIndex(keys).search(queries, 50)
    return Y_train, Y_test, exclude, ids, sims


def test_methods_and_sweeps_match_direct_scoring(problem):
    Y_train, Y_test, exclude, ids, sims = problem
    evaluator = Evaluator(Y_train, Y_test, exclude, (0.55, 1.5))
    settings = EvalSettings(lam=0.5, b=30, tau=0.1, lambda_sweep=[0.0, 0.5, 1.0], b_sweep=[10, 30])
    result = evaluate_retrieval(ids, sims, evaluator, settings)

    truth = remove_pairs(Y_test, exclude)
    prop = propensities(np.bincount(Y_train.indices, minlength=25), 60, 0.55, 1.5)
    for name, lam in (("rae", 0.5), ("dual_encoder", 0.0), ("knn", 1.0)):
        ranked = top_k(rae_scores(ids, sims, Y_train, lam, 0.1, 30), 100, exclude=exclude)
        direct = summarize(per_instance_metrics(ranked, truth, propensity=prop))
        assert {k: result["methods"][name][k] for k in direct} == direct
    sweep = {row["lambda"]: row for row in result["lambda_sweep"]}
    assert sweep[0.0]["P@1"] == result["methods"]["dual_encoder"]["P@1"]
    assert sweep[1.0]["R@100"] == result["methods"]["knn"]["R@100"]
    assert result["b_sweep"][1]["P@5"] == result["methods"]["rae"]["P@5"]  # b=30 is the configured b
    assert 0 <= result["b_sweep"][0]["train_key_share"] <= 100
    assert set(result["per_instance"]["rae"]) >= {"P@1", "P@5", "R@100"}
    assert {r["segment"] for r in segment_rows(result["methods"])} <= {"head", "torso", "tail", "xtail", "unseen"}


def test_significance_report_compares_rae_with_both_baselines(problem):
    Y_train, Y_test, exclude, ids, sims = problem
    result = evaluate_retrieval(ids, sims, Evaluator(Y_train, Y_test, exclude, (0.55, 1.5)),
                                EvalSettings(lam=0.5, b=30, tau=0.1))
    flat = {f"{m}/{k}": v for m, arrays in result["per_instance"].items() for k, v in arrays.items()}
    report = compare_runs(flat, ["P@1", "R@100"], other=flat)
    assert set(report) == {"rae_vs_dual_encoder", "rae_vs_knn", "rae_vs_other", "dual_encoder_vs_other",
                           "knn_vs_other"}
    rae_p1 = result["methods"]["rae"]["P@1"]
    assert report["rae_vs_knn"]["P@1"]["mean_a"] == pytest.approx(rae_p1, abs=0.01)
    assert report["rae_vs_other"]["P@1"]["p_value"] == 1.0  # identical runs


def test_ova_knn_ranks_with_two_separate_softmaxes(problem):
    from raexmc.evaluation import evaluate_ova_knn
    from raexmc.predict import ova_knn_scores

    Y_train, Y_test, exclude, _, _ = problem
    rng = np.random.default_rng(1)
    keys = rng.normal(size=(85, 8)).astype(np.float32)
    keys /= np.linalg.norm(keys, axis=1, keepdims=True)
    queries = keys[:20] + 0.1
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    evaluator = Evaluator(Y_train, Y_test, exclude, (0.55, 1.5))
    settings = EvalSettings(lam=0.3, b=15, tau=0.1)
    got = evaluate_ova_knn(queries, keys, evaluator, settings)

    x = ExactIndex(keys[:60]).search(queries, 15)
    z = ExactIndex(keys[60:]).search(queries, 15)
    ranked = top_k(ova_knn_scores(*x, *z, Y_train, 0.3, 0.1), 100, exclude=exclude)
    assert got["P@1"] == summarize(per_instance_metrics(ranked, remove_pairs(Y_test, exclude)))["P@1"]
