"""Validation on several held-out folds pooled into one curve (`infer.val_folds`): the folds' split, how many auto
takes, and the pooled curve (P@1, and PSP@5 with each fold's own label frequencies) against a dense brute force
that queries each fold's memory apart."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from oracle import inverse_propensity
from raexmc.data.held_out import split_validation, validation_folds
from raexmc.errors import ConfigError
from raexmc.evaluation.selection import select
from raexmc.evaluation.tune_settings import TuneSettings
from raexmc.evaluation.validation_memory import (
    held_out_folds,
    held_out_labels,
    pooled,
    pooled_held,
    validation_retrieval,
)
from raexmc.memory.input_memory import MemorySettings
from raexmc.settings import load_settings
from tests.helpers import dense_top_b_softmax
from tune_helpers import LAMBDAS, TAUS, run_stage, save_embeddings, toy_params, tune_settings, write_training_split

N_INPUTS, N_LABELS, DIM = 40, 6, 16
A, B = 0.55, 1.5  # the propensity pair every evaluator here is given


def random_set(seed: int = 3):
    """40 unit inputs and 6 unit labels in 16 dimensions, each input with one or two labels."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N_INPUTS, DIM))
    Z = rng.standard_normal((N_LABELS, DIM))
    X, Z = (M / np.linalg.norm(M, axis=1, keepdims=True) for M in (X, Z))
    rows = [i for i in range(N_INPUTS) for _ in range(1 + i % 2)]
    cols = [(3 * i + k) % N_LABELS for i in range(N_INPUTS) for k in range(1 + i % 2)]
    Y = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(N_INPUTS, N_LABELS))
    return X.astype(np.float32), Z.astype(np.float32), Y


def pooled_brute_force(X, Z, Y, folds, b, kept=None):
    """P@1 and PSP@5 (percent) at every (λ, τ) over all folds' (memory rows, query rows), from dense matrices: each
    fold's queries against [X_kept; Z] (`kept[i]` the rows fold i's memory keeps, all its memory rows by default),
    scored with the propensities of its memory rows (all of them, as the test set's are of every training input);
    PSP@5 is the sum over every query of 1/p over its hits in its top 5 (labels of positive score), over the sum
    of its best 5 1/p."""
    Y = Y.toarray()
    right, gained, ideal = {}, {}, {}
    for (memory_rows, val_rows), rest_rows in zip(folds, kept or [rows for rows, _ in folds]):
        S = X[val_rows] @ np.vstack([X[rest_rows], Z]).T
        weight = np.asarray(inverse_propensity(Y[memory_rows].sum(axis=0), len(memory_rows), A, B))
        best = np.sort(np.where(Y[val_rows] > 0, weight, 0.0), axis=1)[:, ::-1][:, :5].sum(axis=1)
        for tau in TAUS:
            P = dense_top_b_softmax(S, b, tau)
            for lam in LAMBDAS:
                scores = lam * P[:, :len(rest_rows)] @ Y[rest_rows] + (1 - lam) * P[:, len(rest_rows):]
                ranked = np.argsort(-scores, axis=1, kind="stable")[:, :5]
                ranked_scores = np.take_along_axis(scores, ranked, axis=1)
                hits = (np.take_along_axis(Y[val_rows], ranked, axis=1) > 0) & (ranked_scores > 0)
                right.setdefault((lam, tau), []).extend(hits[:, 0])
                gained[lam, tau] = gained.get((lam, tau), 0.0) + float((hits * weight[ranked]).sum())
                ideal[lam, tau] = ideal.get((lam, tau), 0.0) + float(best.sum())
    return {point: (round(100 * float(np.mean(hits)), 2), 100 * gained[point] / ideal[point])
            for point, hits in right.items()}


def curve_of(selection):
    """The validation rows at the grid's τ (widening may add others): (λ, τ) -> (P@1, PSP@5)."""
    return {(r["lambda"], r["tau"]): (r["P@1"], r["PSP@5"]) for r in selection["validation"] if r["tau"] in TAUS}


def assert_curves_match(measured, expected):
    assert measured.keys() == expected.keys()
    for point, (p_at_1, psp) in expected.items():
        assert measured[point][0] == p_at_1, point
        assert abs(measured[point][1] - psp) <= 0.01, (point, measured[point][1], psp)


def test_folds_are_disjoint_the_first_is_training_validation_split_and_each_memory_is_the_rest():
    folds = validation_folds(N_INPUTS, 0.25, 0, 4)
    assert [len(val) for _, val in folds] == [10] * 4
    assert np.array_equal(np.sort(np.concatenate([val for _, val in folds])), np.arange(N_INPUTS))
    for rest, val in folds:
        assert np.array_equal(np.sort(np.concatenate([rest, val])), np.arange(N_INPUTS))
    order = np.random.default_rng([0, 7]).permutation(N_INPUTS)  # training's split, as it has always been drawn
    assert np.array_equal(folds[0][1], np.sort(order[:10])) and np.array_equal(folds[0][0], np.sort(order[10:]))
    first_rest, first_val = split_validation(sp.csr_matrix((N_INPUTS, 1)), 0.25, 0)
    assert np.array_equal(folds[0][0], first_rest) and np.array_equal(folds[0][1], first_val)
    with pytest.raises(ValueError, match="do not fit"):
        validation_folds(N_INPUTS, 0.25, 0, 5)


@pytest.mark.parametrize(("num_inputs", "fraction", "cap", "trained", "folds"), [
    (8227, 0.05, 20000, False, 5),    # FOLDOC: 411 a fold, ceil(2000 / 411) = 5
    (8227, 0.05, 20000, True, 1),     # fine-tuned: training held out the first fold only
    (40000, 0.05, 20000, False, 1),   # 2,000 a fold already
    (87787, 0.05, 20000, False, 1),   # WordNet
    (100, 0.05, 20000, False, 20),    # 5 a fold would take 400 folds: 1 / 0.05 at most
    (29, 0.05, 20000, False, 20),     # folds of 1 (29 disjoint): still 1 / 0.05 at most
    (8227, 0.05, 100, False, 5),      # the query cap does not multiply the folds
    (10, 0.01, 20000, False, 1),      # nothing held out (the stage's own error says so)
])
def test_auto_takes_enough_folds_for_2000_held_out_inputs(num_inputs, fraction, cap, trained, folds):
    settings = tune_settings(val_fraction=fraction, val_max_queries=cap, val_folds=None, encoder_trained=trained)
    assert settings.folds_for(num_inputs) == folds


def test_more_folds_than_fit_and_a_split_that_leaves_the_memory_empty_name_their_keys(tmp_path):
    settings = TuneSettings.from_settings(load_settings(toy_params(tmp_path, val_fraction=0.25, val_folds=5)))
    with pytest.raises(ConfigError, match="at most 4") as error:
        settings.folds_for(N_INPUTS)
    assert error.value.record == "infer.val_folds"
    # held-out inputs with no memory input left: tune would carry on with zero input keys
    with pytest.raises(ConfigError, match="leaves 4 held-out and 0 memory inputs of 4") as error:
        held_out_labels(sp.csr_matrix(np.eye(4)), sp.csr_matrix((4, 4)), np.array([], np.int64), np.arange(4))
    assert error.value.one_line().startswith("ConfigError: params.yaml:infer.val_fraction: ")


@pytest.mark.parametrize("b", [45, 8])  # every key retrieved; the top 8 of 36, so the joint merge truncates
def test_pooled_curve_is_every_folds_queries_against_its_own_memory(tmp_path, b):
    """Four folds of 10: the curve is the brute force's over all 40 queries, each against the 30 others, PSP with
    each fold's own label frequencies; the selection reports one fold's memory and every fold's queries."""
    X, Z, Y = random_set()
    save_embeddings(tmp_path / "emb", X, Z)
    settings = tune_settings(b=b, val_fraction=0.25, val_folds=4)
    folds = held_out_folds(Y, sp.csr_matrix(Y.shape), settings)
    full = MemorySettings(1.0, "random", False, 0)
    retrieval = pooled([validation_retrieval(tmp_path / "emb", fold, b, memory=full) for fold in folds],
                       pooled_held(folds))
    chosen = select(retrieval, settings, (A, B)).record()
    expected = pooled_brute_force(X, Z, Y, validation_folds(N_INPUTS, 0.25, 0, 4), b=b)
    assert_curves_match(curve_of(chosen), expected)
    assert (chosen["val_queries"], chosen["val_folds"], chosen["memory_inputs"], chosen["memory_input_keys"]) \
        == (40, 4, 30, 30)
    one = select(validation_retrieval(tmp_path / "emb", folds[0], b, memory=full), settings, (A, B)).record()
    first_fold = pooled_brute_force(X, Z, Y, validation_folds(N_INPUTS, 0.25, 0, 1), b=b)
    assert_curves_match(curve_of(one), first_fold)
    assert first_fold != expected


def test_stage_with_auto_folds_pools_them_and_a_selected_memory_per_fold(tmp_path):
    """keep 0.5 (random, seed 7) at val_fraction 0.25 with folds auto: four folds, each memory 15 of its 30
    remaining inputs as that seed draws them from that fold's rows; the curve is the brute force's over them."""
    X, Z, Y = random_set()
    write_training_split(tmp_path, X, Z, Y)
    params = toy_params(tmp_path, **{"lambda": "auto", "val_fraction": 0.25, "b": 45, "val_folds": "auto",
                                     "lambda_sweep": LAMBDAS, "tau_grid": list(TAUS), "memory.keep": 0.5,
                                     "memory.method": "random", "memory.seed": 7, "memory.prototypes": 0})
    proc = run_stage(tmp_path, params)
    assert proc.returncode == 0, proc.stderr
    chosen = json.loads((tmp_path / "tune" / "selection.json").read_text())

    folds = validation_folds(N_INPUTS, 0.25, 0, 4)
    kept = [rest[np.sort(np.random.default_rng(7).choice(30, 15, replace=False))] for rest, _ in folds]
    assert (chosen["val_queries"], chosen["val_folds"], chosen["memory_input_keys"]) == (40, 4, 15)
    assert_curves_match(curve_of(chosen), pooled_brute_force(X, Z, Y, folds, b=45, kept=kept))

