"""Choosing λ and τ on held-out training inputs: the choice against a dense brute force on memories
built so that one side of the values is right, the split that keeps queries out of their own memory,
the cap on how many of them query, and the tune stage's output and its one-line errors."""

from __future__ import annotations

import json
import math
from functools import partial

import numpy as np
import pytest
import scipy.sparse as sp
from ruamel.yaml import YAML

import tune_helpers
from raexmc.data.held_out import query_sample, split_validation
from raexmc.errors import DataError
from raexmc.evaluation import evaluator
from raexmc.evaluation.selection import choose, past_edge, select
from raexmc.evaluation.selection_file import Selection, read_selection, write_selection
from raexmc.evaluation.tune_settings import TuneSettings
from raexmc.evaluation.validation_memory import (
    HeldOutLabels,
    ValidationRetrieval,
    held_out_labels,
    validation_retrieval,
)
from raexmc.memory.merge import RaeRetrieval
from raexmc.settings import load_settings
from tests.helpers import REPO, dense_top_b_softmax, selection_record
from tune_helpers import (
    LAMBDAS,
    TAUS,
    run_stage,
    save_embeddings,
    toy_params,
    tune_settings,
    unit_rows,
    write_training_split,
)

unit = partial(tune_helpers.unit, 32)


def memory(inputs_right: bool):
    """Two held-out queries (rows 0, 1) and two memory inputs (rows 2, 3); labels i (right) and 2+i (wrong).

    Query i = e_i. When `inputs_right`, memory input 2+i (similarity 0.8) holds the right label i and
    the wrong label's key (similarity 0.9) is nearer than the right label's (0): only λ near 1 ranks
    the right label first. Otherwise the memory input holds the wrong label (similarity 0.9) and the
    right label's key is at 0.8: only λ near 0 wins.
    """
    near, far = (0.8, 0.9) if inputs_right else (0.9, 0.8)
    queries = [unit((i, 1.0)) for i in range(2)]
    rest = [unit((i, near), (10 + i, math.sqrt(1 - near ** 2))) for i in range(2)]
    right_labels = [unit((i, far), (20 + i, math.sqrt(1 - far ** 2))) if not inputs_right else unit((25 + i, 1.0))
                    for i in range(2)]
    wrong_labels = [unit((i, far), (20 + i, math.sqrt(1 - far ** 2))) if inputs_right else unit((27 + i, 1.0))
                    for i in range(2)]
    X = np.array(queries + rest, dtype=np.float32)
    Z = np.array(right_labels + wrong_labels, dtype=np.float32)
    rest_labels = [0, 1] if inputs_right else [2, 3]
    Y = sp.csr_matrix((np.ones(4), ([0, 1, 2, 3], [0, 1, *rest_labels])), shape=(4, 4))
    return X, Z, Y


def brute_force(X, Z, Y, val_rows, rest_rows, b, taus=TAUS):
    """P@1 (percent) of every (λ, τ) from dense matrices, and the best by the documented tie rule."""
    Y = Y.toarray()
    K = np.vstack([X[rest_rows], Z])
    S = X[val_rows] @ K.T
    curve = {}
    for tau in taus:
        P = dense_top_b_softmax(S, b, tau)
        for lam in LAMBDAS:
            scores = lam * P[:, :len(rest_rows)] @ Y[rest_rows] + (1 - lam) * P[:, len(rest_rows):]
            top = scores.argmax(axis=1)
            curve[lam, tau] = round(100 * float(np.mean(Y[val_rows, top] > 0)), 2)
    best = min(curve, key=lambda k: (-curve[k], abs(k[0] - 0.5), abs(math.log(k[1] / 0.04))))
    return curve, best


@pytest.mark.parametrize("inputs_right", [True, False])
@pytest.mark.parametrize("chunk", [8192, 1])  # 1: each query's scores computed and ranked apart
@pytest.mark.parametrize("workers", ["1", "3"])  # a chunk's λs ranked one after another, or on threads
def test_choice_matches_brute_force_where_one_side_of_the_values_is_right(inputs_right, chunk, workers, tmp_path,
                                                                          monkeypatch):
    monkeypatch.setattr(evaluator, "QUERY_CHUNK", chunk)
    monkeypatch.setenv("RAEXMC_WORKERS", workers)
    X, Z, Y = memory(inputs_right)
    val_rows, rest_rows = np.array([0, 1]), np.array([2, 3])
    held = held_out_labels(Y, sp.csr_matrix((4, 4)), rest_rows, val_rows)
    retrieval = validation_retrieval(save_embeddings(tmp_path / "emb", X, Z), held, b=6)
    chosen = select(retrieval, tune_settings(), (0.55, 1.5)).record()
    tried = sorted({r["tau"] for r in chosen["validation"]})  # the grid, and what widening added past its edges
    curve, best = brute_force(X, Z, Y, val_rows, rest_rows, b=6, taus=tried)

    assert {(r["lambda"], r["tau"]): r["P@1"] for r in chosen["validation"]} == curve
    assert (chosen["lambda"], chosen["tau"]) == best
    assert chosen["val_value"] == 100.0
    if inputs_right:
        assert chosen["lambda"] > 0.5, "the memory inputs hold the right labels: high λ must win"
    else:
        assert chosen["lambda"] < 0.5, "the label keys are the right ones: low λ must win"
    assert chosen["fixed_val_value"] == curve[0.5, 0.04] == 0.0


def test_a_fixed_value_keeps_it_and_chooses_the_other(tmp_path):
    X, Z, Y = memory(inputs_right=True)
    held = held_out_labels(Y, sp.csr_matrix((4, 4)), np.array([2, 3]), np.array([0, 1]))
    retrieval = validation_retrieval(save_embeddings(tmp_path / "emb", X, Z), held, b=6)
    curve, _ = brute_force(X, Z, Y, np.array([0, 1]), np.array([2, 3]), b=6)
    fixed_tau = select(retrieval, tune_settings(tau=0.02), (0.55, 1.5)).record()
    best_at = -max((curve[lam, 0.02], -abs(lam - 0.5), -lam) for lam in LAMBDAS)[2]
    assert (fixed_tau["lambda"], fixed_tau["tau"]) == (best_at, 0.02)
    both_fixed = select(retrieval, tune_settings(lam=0.3, tau=0.04), (0.55, 1.5)).record()
    assert (both_fixed["lambda"], both_fixed["tau"]) == (0.3, 0.04)
    assert len(both_fixed["validation"]) == len(LAMBDAS) * len(TAUS), "the curve is still computed"


JOINT_TIE = [{"lambda": 0.5, "tau": 0.04, "label_share": 0.5, "P@1": 50.0},
             {"lambda": 0.1, "tau": 0.2, "label_share": None, "P@1": 50.0}]


@pytest.mark.parametrize(("rows", "chosen"), [
    # ties go to the value nearest the paper's λ 0.5, then τ 0.04
    ([{"lambda": lam, "tau": tau, "P@1": 50.0} for lam in (0.1, 0.3, 0.9) for tau in (0.01, 0.05, 0.1)],
     {"lambda": 0.3, "tau": 0.05}),
    # 0.02 and 0.07 around 0.04: by difference 0.02 is nearer, by ratio (x1.75 against x2) 0.07; τ is a scale
    ([{"lambda": 0.5, "tau": tau, "P@1": 50.0} for tau in (0.02, 0.07)], {"tau": 0.07}),
    ([{"lambda": 0.5, "tau": tau, "P@1": 50.0} for tau in (0.07, 0.02)], {"tau": 0.07}),
    (JOINT_TIE, {"label_share": None}),  # a tie between the retrievals goes to joint
    ([{**JOINT_TIE[0], "P@1": 50.01}, JOINT_TIE[1]], {"label_share": 0.5})])
def test_choose_breaks_ties_by_the_documented_rule(rows, chosen):
    best = choose(rows, "P@1")
    assert {key: best[key] for key in chosen} == chosen


def forty_inputs_five_labels():
    """Random unit vectors: 40 training inputs (input i has label i % 5) and 5 label keys."""
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(45, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    Y = sp.csr_matrix((np.ones(40), (np.arange(40), np.arange(40) % 5)), shape=(40, 5))
    return vectors[:40], vectors[40:], Y


def test_held_out_queries_are_not_keys_of_their_memory(tmp_path):
    """Every training input is also a would-be key; a query that found itself would score 1.0."""
    X, Z, Y = forty_inputs_five_labels()
    rest_rows, val_rows = split_validation(Y, 0.25, 0)
    retrieval = validation_retrieval(save_embeddings(tmp_path / "emb", X, Z),
                                     held_out_labels(Y, sp.csr_matrix((40, 5)), rest_rows, val_rows), b=45)

    assert len(val_rows) == 10 and sorted([*val_rows, *rest_rows]) == list(range(40))
    ids, sims = retrieval.model(0.04).keys(retrieval.inputs, retrieval.labels)
    assert ((ids >= 0).sum(axis=1) == 30 + 5).all(), "the memory holds the 30 other inputs and the 5 labels"
    input_keys = (ids >= 0) & (ids < len(rest_rows))
    found_rows = rest_rows[ids[input_keys]]
    assert not np.isin(found_rows, val_rows).any(), "a held-out input is a key of its own memory"
    assert sims[:, 0].max() < 0.999, "a query found itself"
    assert (retrieval.held.Y_val != Y[val_rows]).nnz == 0 and retrieval.held.Y_rest.shape == (30, 5)


def test_project_params_choose_lambda_and_tau_and_the_preset_fixes_the_papers(tmp_path):
    """The default run chooses λ and τ on validation (bench/results/defaults_choice.json); the paper-inference preset
    sets the paper's 0.5 and 0.04, still on the tune stage's grid, so a choice may land there."""
    chosen = TuneSettings.from_settings(load_settings(REPO / "params.yaml"))
    assert (chosen.lam, chosen.tau) == (None, None) and 0.5 in chosen.lambda_grid and 0.04 in chosen.tau_grid
    params = YAML().load((REPO / "params.yaml").read_text())
    for key, value in YAML().load((REPO / "presets.yaml").read_text())["paper-inference"].items():
        section, leaf = key.split(".")
        params[section][leaf] = value
    YAML().dump(params, tmp_path / "params.yaml")
    fixed = TuneSettings.from_settings(load_settings(tmp_path / "params.yaml"))
    assert (fixed.lam, fixed.tau, fixed.retrieval) == (0.5, 0.04, "joint")


@pytest.mark.parametrize("key, value", [("infer.lambda", "abc"), ("memory.keep_grid", [0.5, 2])])
def test_stage_bad_value_is_one_line_exit_2_before_reading_data_and_writes_nothing(tmp_path, key, value):
    """An infer key and a memory key: the stage checks every key as it loads (test_settings.py has them all)."""
    proc = run_stage(tmp_path, toy_params(tmp_path, **{key: value}))  # there is no dataset here
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(f"ConfigError: {tmp_path / 'params.yaml'}:{key}: ")
    assert not (tmp_path / "tune").exists()


def test_query_sample_keeps_at_most_the_cap_seeded_in_order():
    held_out = np.arange(0, 3000, 3)
    sample = query_sample(held_out, 250, seed=4)
    assert len(sample) == 250 and len(set(sample)) == 250 and np.isin(sample, held_out).all()
    assert (np.diff(sample) > 0).all(), "the held-out inputs' order is kept"
    np.testing.assert_array_equal(query_sample(held_out, 250, seed=4), sample)
    assert not np.array_equal(query_sample(held_out, 250, seed=5), sample), "another seed, another sample"
    for cap in (len(held_out), len(held_out) + 1):
        np.testing.assert_array_equal(query_sample(held_out, cap, seed=4), held_out)


@pytest.mark.parametrize("cap", [4, 10, 20000])
def test_stage_reads_no_test_split_and_queries_at_most_val_max_queries_of_the_held_out_inputs(tmp_path, cap):
    """A quarter of 40 inputs (10) is held out of the memory whatever the cap; min(10, cap) of them query,
    and the curve is the brute force's on exactly those; from 10 up the cap changes nothing. λ auto at τ 0.04
    chooses the curve's best there, on the joint retrieval, and records the fixed λ it was weighed against."""
    X, Z, Y = forty_inputs_five_labels()
    write_training_split(tmp_path, X, Z, Y)
    params = toy_params(tmp_path, **{"lambda": "auto", "val_fraction": 0.25, "val_max_queries": cap, "b": 45,
                                       "lambda_sweep": LAMBDAS, "tau_grid": TAUS})
    proc = run_stage(tmp_path, params)
    assert proc.returncode == 0, proc.stderr
    chosen = json.loads((tmp_path / "tune" / "selection.json").read_text())

    rest_rows, held_out = split_validation(Y, 0.25, 0)
    query_rows = query_sample(held_out, cap, 0)
    assert len(held_out) == 10 and len(query_rows) == min(10, cap) and np.isin(query_rows, held_out).all()
    assert (chosen["val_queries"], chosen["memory_inputs"], chosen["val_max_queries"]) == (min(10, cap), 30, cap)
    curve, _ = brute_force(X, Z, Y, query_rows, rest_rows, b=45)
    assert {(r["lambda"], r["tau"]): r["P@1"] for r in chosen["validation"]} == curve
    at_tau = {lam: p for (lam, tau), p in curve.items() if tau == 0.04}
    assert chosen["tau"] == 0.04 and at_tau[chosen["lambda"]] == max(at_tau.values())
    assert chosen["auto"] == {"lambda": True, "tau": False, "retrieval": False, "label_share": False}
    assert (chosen["retrieval"], chosen["label_share"], chosen["fixed_lambda"]) == ("joint", None, 0.5)


def test_read_selection_checks_what_evaluate_and_package_will_use(tmp_path):
    with pytest.raises(DataError, match="run the tune stage"):
        read_selection(tmp_path)
    path = tmp_path / "selection.json"
    path.write_text(json.dumps(selection_record(**{"lambda": 0.3})))
    assert read_selection(tmp_path).lam == 0.3 and read_selection(tmp_path).rae_retrieval == RaeRetrieval()
    path.write_text(json.dumps(selection_record(retrieval="split", label_share=0.25)))
    assert read_selection(tmp_path).rae_retrieval == RaeRetrieval("split", 0.25)
    for bad, key, says in (
            ({"lambda": 1.5}, "lambda", "must be less than or equal to 1, got 1.5"),
            ({"lambda": "0.3"}, "lambda", "must be a number, got '0.3'"),
            ({"tau": 0}, "tau", "must be greater than 0, got 0"),
            ({"retrieval": "nearest"}, "retrieval", "must be 'joint' or 'split', got 'nearest'"),
            ({"retrieval": "split", "label_share": 2}, "label_share", "must be less than or equal to 1, got 2"),
            ({"baselines": {"knn": {"tau": -1, "auto": {"tau": True}}}}, "baselines.knn.tau",
             "must be greater than 0, got -1"),
            ({"baselines": ["knn"]}, "baselines", "must be a mapping of settings, got ['knn']"),
            ({"lamda": 0.3}, "lamda", "unknown key")):
        path.write_text(json.dumps(selection_record(**bad)))
        with pytest.raises(DataError) as error:
            read_selection(tmp_path)
        assert error.value.record == key, bad
        assert str(error.value) == f"DataError: {path}:{key}: {says}: rerun the tune stage"
    for bad in ({"retrieval": "split"}, {"label_share": 0.5}):  # a share with a joint retrieval, none with a split
        path.write_text(json.dumps(selection_record(**bad)))
        with pytest.raises(DataError, match="label_share must be a number in .0, 1. for a split retrieval"):
            read_selection(tmp_path)
    record = selection_record()
    del record["tau"]
    path.write_text(json.dumps(record))
    with pytest.raises(DataError, match="lacks tau: rerun the tune stage"):
        read_selection(tmp_path)


def test_the_written_record_is_the_read_one(tmp_path):
    """What the tune stage writes reads back to the same record, and the file has the optional keys only where set."""
    selection = Selection.model_validate(selection_record(baselines={"knn": {"tau": 0.04, "auto": {"tau": False}}}))
    write_selection(tmp_path, selection)
    written = json.loads((tmp_path / "selection.json").read_text())
    assert read_selection(tmp_path) == selection and written["baselines"] == {"knn": {"tau": 0.04,
                                                                                     "auto": {"tau": False}}}
    assert not {"keep", "keep_curve", "prototypes", "prototypes_curve"} & set(written)
    assert written["label_share"] is None and selection.knn_tau == 0.04
    assert Selection.model_validate(selection_record(tau=0.07)).knn_tau == 0.07, "no kNN choice: RAE's τ"
    # lambda_rows put validation beside test at the chosen τ and share
    selection = Selection.model_validate(selection_record(metric="P@5", tau=0.1, validation=[
        {"lambda": 0.0, "tau": 0.1, "P@5": 10.0}, {"lambda": 0.5, "tau": 0.1, "P@5": 30.0},
        {"lambda": 0.5, "tau": 0.04, "P@5": 99.0}, {"lambda": 0.7, "tau": 0.1, "P@5": 20.0}]))
    test = [{"lambda": 0.0, "P@5": 11.0}, {"lambda": 0.5, "P@5": 31.0}, {"lambda": 1.0, "P@5": 5.0}]
    assert selection.lambda_rows(test) == [{"lambda": 0.0, "validation": 10.0, "test": 11.0},
                                           {"lambda": 0.5, "validation": 30.0, "test": 31.0}]
    split = Selection.model_validate(selection_record(tau=0.1, retrieval="split", label_share=0.25, validation=[
        {"lambda": 0.5, "tau": 0.1, "label_share": 0.5, "P@1": 10.0},
        {"lambda": 0.5, "tau": 0.1, "label_share": 0.25, "P@1": 30.0}]))
    assert split.lambda_rows([{"lambda": 0.5, "P@1": 31.0}]) == [{"lambda": 0.5, "validation": 30.0, "test": 31.0}]


@pytest.mark.parametrize("prototypes", [0, 0.5])
def test_stage_chooses_on_a_memory_selected_from_the_remaining_inputs(tmp_path, prototypes):
    """memory.keep 0.5 (random, seed 7) of the 30 inputs left after holding out 10: the validation curve is
    the brute force's over the 15 inputs that seed draws from those 30, and the labels; with label
    prototypes, labels unit(z + α·unit(sum of the keys of the label's inputs among those 30)): the held-out
    inputs are no part of them."""
    X, Z, Y = forty_inputs_five_labels()
    write_training_split(tmp_path, X, Z, Y)
    params = toy_params(tmp_path, **{"lambda": "auto", "val_fraction": 0.25, "b": 45, "lambda_sweep": LAMBDAS,
                                     "tau_grid": TAUS, "memory.keep": 0.5, "memory.method": "random",
                                     "memory.seed": 7, "memory.prototypes": prototypes,
                                     "index.backend": "hnsw"})  # prototypes need graphs; auto would search exactly
    proc = run_stage(tmp_path, params)
    assert proc.returncode == 0, proc.stderr
    chosen = json.loads((tmp_path / "tune" / "selection.json").read_text())

    rest_rows, held_out = split_validation(Y, 0.25, 0)
    kept = rest_rows[np.sort(np.random.default_rng(7).choice(30, 15, replace=False))]
    assert (chosen["memory_inputs"], chosen["memory_input_keys"]) == (30, 15)
    Y_rest = Y[rest_rows].toarray() > 0
    label_keys = unit_rows(Z + prototypes * unit_rows(Y_rest.T.astype(np.float64) @ X[rest_rows])) if prototypes else Z
    curve, _ = brute_force(X, label_keys, Y, query_sample(held_out, 20000, 0), kept, b=45)
    assert {(r["lambda"], r["tau"]): r["P@1"] for r in chosen["validation"]} == curve


GRID_TAUS = (0.01, 0.02, 0.04, 0.07, 0.1)
COPIES = 4  # input keys per query that carry its label R


def crossing_retrieval(crossings: list[float], truth: str) -> ValidationRetrieval:
    """Queries whose right answer flips at a known τ. Query j retrieves one label key, of label W_j = 2j, at
    similarity 0.9, and COPIES input keys, each holding label R_j = 2j + 1, at 0.9 - t_j ln(COPIES). At λ = 0.5,
    R_j outscores W_j exactly when the inputs' softmax mass COPIES exp(s_R / τ) beats exp(0.9 / τ), that is when
    τ > t_j. `truth` "R": query j is right above t_j; "W": below it."""
    n = len(crossings)
    input_sims = 0.9 - np.asarray(crossings)[:, None] * math.log(COPIES) * np.ones((1, COPIES))
    inputs = (np.arange(n * COPIES).reshape(n, COPIES), input_sims.astype(np.float32))
    labels = (np.arange(n)[:, None] * 2, np.full((n, 1), 0.9, np.float32))
    Y_rest = sp.csr_matrix((np.ones(n * COPIES), (np.arange(n * COPIES), np.repeat(np.arange(n) * 2 + 1, COPIES))),
                           shape=(n * COPIES, 2 * n))
    right = np.arange(n) * 2 + (1 if truth == "R" else 0)
    Y_val = sp.csr_matrix((np.ones(n), (np.arange(n), right)), shape=(n, 2 * n))
    held = HeldOutLabels(Y_val, Y_rest, sp.csr_matrix((n, 2 * n)), np.arange(n), np.arange(n * COPIES))
    return ValidationRetrieval(inputs, labels, COPIES + 1, held, Y_rest)


@pytest.mark.parametrize(("crossings", "truth", "expected", "widened", "best"), [
    # right above t_j: on the grid the top, 0.1, is best (1 of 3 right); past it come 0.2 (2 of 3), 0.4 (all)
    # and 0.8 (all, farther from 0.04): 0.4, the first doubling above 0.3
    ([0.08, 0.15, 0.3], "R", 0.4, [0.2, 0.4, 0.8], 100.0),
    # right below t_j: on the grid the bottom, 0.01, is best (1 of 3); past it come 0.005 (2 of 3), 0.0025
    # (all) and 0.00125 (all, farther): 0.0025, the first halving below 0.003
    ([0.003, 0.008, 0.015], "W", 0.0025, [0.00125, 0.0025, 0.005], 100.0),
    # P@1 grows with every doubling and beyond the third (the last query is right only above τ = 1): the grid
    # grows by WIDEN_STEPS doublings, no more, and the choice is the last of them
    ([0.09, 0.15, 0.3, 0.6, 1.0], "R", 0.8, [0.2, 0.4, 0.8], 80.0)])
def test_a_best_tau_off_the_grid_is_found_by_widening_it_up_to_its_bound(crossings, truth, expected, widened, best):
    chosen = select(crossing_retrieval(crossings, truth),
                    tune_settings(lam=0.5, lambda_grid=(0.5,), tau_grid=GRID_TAUS, b=COPIES + 1), (0.55, 1.5)).record()

    assert chosen["tau"] == expected and chosen["val_value"] == best
    tried = sorted({r["tau"] for r in chosen["validation"]})
    assert tried == sorted([*GRID_TAUS, *widened]), "the curve keeps every τ tried"
    for row in chosen["validation"]:  # P@1 at every τ tried, from the crossings alone
        right = [(row["tau"] > t) if truth == "R" else (row["tau"] < t) for t in crossings]
        assert row["P@1"] == round(100 * sum(right) / len(right), 2)


@pytest.mark.parametrize(("axis", "grid", "value", "expected"), [
    ("tau", [0.01, 0.1], 0.1, [0.2]), ("tau", [0.01, 0.1], 0.01, [0.005]), ("tau", [0.01, 0.1], 0.05, []),
    ("lambda", [0.3, 0.5], 0.5, [0.7]), ("lambda", [0.3, 0.5], 0.3, [0.1]), ("lambda", [0.0, 0.5, 1.0], 1.0, []),
    ("lambda", [0.5, 0.95], 0.95, [1.0]), ("label_share", [0.5], 0.5, [0.6, 0.4])])
def test_past_edge_by_hand(axis, grid, value, expected):
    assert past_edge(axis, grid, value, grid) == expected


def dense_split_p_at_1(X, Z, Y, val_rows, rest_rows, b, lam, tau, share) -> float:
    """P@1 (percent) of RAE on the split retrieval, from dense similarities: the b_z = share x b (rounded half
    up) most similar labels and the b - b_z most similar remaining inputs, one softmax over them all."""
    num_z = math.floor(share * b + 0.5)
    S_x, S_z = X[val_rows] @ X[rest_rows].T, X[val_rows] @ Z.T
    Y_rest, Y_val = Y[rest_rows].toarray(), Y[val_rows].toarray()
    right = []
    for q in range(len(val_rows)):
        top_x, top_z = np.argsort(-S_x[q], kind="stable")[:b - num_z], np.argsort(-S_z[q], kind="stable")[:num_z]
        weights = np.exp(np.concatenate([S_x[q, top_x], S_z[q, top_z]]).astype(np.float64) / tau)
        weights /= weights.sum()
        scores = lam * weights[:len(top_x)] @ Y_rest[top_x] + (1 - lam) * np.bincount(
            top_z, weights[len(top_x):], minlength=Z.shape[0])
        right.append(Y_val[q, scores.argmax()] > 0)
    return round(100 * float(np.mean(right)), 2)


@pytest.mark.parametrize("retrieval", ["split", None])  # None: auto, joint or split
def test_split_choice_of_the_label_share_matches_brute_force(tmp_path, retrieval):
    """Every point of a split retrieval's curve against dense brute force; the share is chosen in a second
    round at the chosen τ, and the choice is the curve's best by the tie rule. With the retrieval auto, the joint
    rows are the joint brute force's too, measured from the same searches, and joint wins a tie."""
    X, Z, Y = forty_inputs_five_labels()
    rest_rows, val_rows = split_validation(Y, 0.25, 0)
    retrieval_memory = validation_retrieval(save_embeddings(tmp_path / "emb", X, Z),
                                            held_out_labels(Y, sp.csr_matrix((40, 5)), rest_rows, val_rows), b=8)
    chosen = select(retrieval_memory, tune_settings(b=8, retrieval=retrieval, label_share=None,
                                               label_share_grid=(0.25, 0.75), lambda_grid=(0.1, 0.5, 0.9),
                                               tau_grid=(0.05, 0.1)), (0.55, 1.5)).record()

    rows = [row for row in chosen["validation"] if row["label_share"] is not None]
    for row in rows:
        assert row["P@1"] == dense_split_p_at_1(X, Z, Y, val_rows, rest_rows, 8, row["lambda"], row["tau"],
                                                row["label_share"]), row
    split_tau = {r["tau"] for r in rows if r["label_share"] != 0.5}
    assert len(split_tau) == 1 and {r["label_share"] for r in rows if r["tau"] in split_tau} >= {0.25, 0.5, 0.75}
    assert {r["tau"] for r in rows if r["label_share"] == 0.5} >= {0.05, 0.1} and chosen["auto"]["label_share"]
    joint = [row for row in chosen["validation"] if row["label_share"] is None]
    if retrieval is None:
        taus = sorted({r["tau"] for r in joint})
        curve, _ = brute_force(X, Z, Y, val_rows, rest_rows, b=8, taus=taus)
        assert {(r["lambda"], r["tau"]): r["P@1"] for r in joint} == {k: v for k, v in curve.items()
                                                                       if k[0] in {r["lambda"] for r in joint}}
    assert bool(joint) == (retrieval is None) and chosen["auto"]["retrieval"] == (retrieval is None)
    best = min(chosen["validation"], key=lambda r: (-r["P@1"], r["label_share"] is not None,
                                                    abs(r["lambda"] - 0.5), abs(math.log(r["tau"] / 0.04)),
                                                    abs((r["label_share"] or 0.5) - 0.5)))
    assert (chosen["lambda"], chosen["tau"], chosen["label_share"]) == (best["lambda"], best["tau"],
                                                                        best["label_share"])
    assert chosen["retrieval"] == ("joint" if best["label_share"] is None else "split")
