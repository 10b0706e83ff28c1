"""`memory.prototypes: auto` below keep 1: the tune stage chooses the label prototypes' α on held-out training inputs
(λ and τ chosen afresh at each), logs the α curve, never reads the test split, and the memory stage builds the α it
chose.

The toy: 10 training inputs, 2 held out (they query), b = 1, so each query's P@1 is whether its single nearest key
holds its label. Query 1 = e0 has label A, whose text key is e2⊥ (z_A = e1) and whose memory inputs unit(e0 ± 10·e4)
sum to the direction e0: A's prototype unit(e1 + α·e0) is at α/√(1+α²) from the query. Label B has no inputs and
sits at 0.3/√1.09 from it, so A is nearest iff α > 0.3 (A's inputs, at 1/√101, never are). Query 2 = e2 has label
C, text key e2 itself and inputs summing to e3: C's prototype is at 1/√(1+α²), label D (no inputs) at 1/√1.49, so C
is nearest iff α < 0.7. Over the grid [0, 0.25, 0.5, 1, 2] P@1 is then 50, 50, 100, 50, 50: α 0.5 wins. With one
key retrieved and no input key ever it, every λ < 1 ranks alike, so λ and τ go to the tie rule's 0.5 and 0.04.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from raexmc.data.held_out import split_validation
from raexmc.evaluation import memory_choice
from raexmc.evaluation.memory_choice import MemoryTuning, choose_keep
from tests.helpers import write_params
from tune_helpers import TAUS, assert_test_split_unread, memory_tuning, run_stage, tune_metrics, write_training_split

N, FRACTION, SEED, DIM = 10, 0.2, 0, 16
A, B, C, D, E = range(5)
LAMBDAS = [0.0, 0.5, 0.9]   # 0.5 and TAUS' 0.04 inside their grids: neither widens
GRID = [0, 0.25, 0.5, 1, 2]
EXPECTED_CURVE = [(0.0, 50.0), (0.25, 50.0), (0.5, 100.0), (1.0, 50.0), (2.0, 50.0)]   # α, P@1: the docstring's


def unit_of(**axes: float) -> np.ndarray:
    v = np.zeros(DIM)
    for axis, value in axes.items():
        v[int(axis[1:])] = value
    return v / np.linalg.norm(v)


def toy():
    """X, Z, Y of the module's toy: the two held-out rows query, the rest are the memory's inputs."""
    rest_rows, held = split_validation(sp.csr_matrix((N, 5)), FRACTION, SEED)
    X, labels = np.zeros((N, DIM)), np.full(N, E)
    X[held[0]], labels[held[0]] = unit_of(e0=1), A
    X[held[1]], labels[held[1]] = unit_of(e2=1), C
    members = [(unit_of(e0=1, e4=10), A), (unit_of(e0=1, e4=-10), A), (unit_of(e3=1, e5=10), C),
               (unit_of(e3=1, e5=-10), C), *((unit_of(e8=1, **{f"e{9 + i}": 1}), E) for i in range(4))]
    for row, (key, label) in zip(rest_rows, members):
        X[row], labels[row] = key, label
    c1, c2 = 0.3 / np.sqrt(1.09), 1 / np.sqrt(1.49)
    Z = np.array([unit_of(e1=1), unit_of(e0=c1, e6=np.sqrt(1 - c1 ** 2)), unit_of(e2=1),
                  unit_of(e2=c2, e7=np.sqrt(1 - c2 ** 2)), unit_of(e8=1)])
    Y = sp.csr_matrix((np.ones(N), (np.arange(N), labels)), shape=(N, 5))
    return X.astype(np.float32), Z.astype(np.float32), Y


def toy_params(folder, **memory):
    return write_params(folder, **{"infer.lambda": "auto", "infer.tau": "auto", "infer.lambda_sweep": LAMBDAS,
                                   "infer.tau_grid": TAUS, "infer.b": 1, "infer.val_fraction": FRACTION,
                                   "infer.val_seed": SEED, "infer.val_folds": 1,  # the toy holds out one set
                                   "memory.keep": 0.5, "memory.method": "random", "memory.seed": SEED,
                                   "memory.prototypes": "auto", "memory.prototypes_grid": GRID,
                                   **{f"memory.{key}": value for key, value in memory.items()},
                                   "index.backend": "hnsw"})  # prototypes need graphs; auto would search exactly


def memory_stage(tmp_path, params, **choice):
    return run_stage(tmp_path, params, "memory", embeddings=tmp_path / "emb", out=tmp_path / "memory", **choice)


@pytest.mark.slow  # several stage or torchrun processes: CI's second step
def test_auto_prototypes_choose_alpha_on_validation_alone_and_the_memory_stage_builds_it(tmp_path):
    X, Z, Y = toy()
    write_training_split(tmp_path, X, Z, Y)  # no test split at all: the stage must not need one
    params = toy_params(tmp_path)
    proc = run_stage(tmp_path, params)
    assert proc.returncode == 0, proc.stderr
    assert "α 0.5 joint λ 0.5 τ 0.04 (validation" in proc.stderr and "tune chose " in proc.stderr
    chosen = json.loads((tmp_path / "tune" / "selection.json").read_text())
    assert (chosen["prototypes"], chosen["lambda"], chosen["tau"], chosen["val_value"]) == (0.5, 0.5, 0.04, 100.0)
    assert chosen["auto"] == {"lambda": True, "tau": True, "retrieval": True, "label_share": True, "prototypes": True}
    assert [(r["prototypes"], r["P@1"]) for r in chosen["prototypes_curve"]] == EXPECTED_CURVE
    assert {(r["lambda"], r["tau"], r["input_keys"]) for r in chosen["prototypes_curve"]} == {(0.5, 0.04, 4)}
    assert json.loads((tmp_path / "tune" / "memory_choice.json").read_text()) == {"keep": 0.5, "prototypes": 0.5}

    metrics = tune_metrics()
    assert metrics["tune/prototypes"] == 0.5
    for weight, p_at_1 in EXPECTED_CURVE:
        assert (metrics[f"tune/prototypes_curve.{weight:g}.P_at_1"],
                metrics[f"tune/prototypes_curve.{weight:g}.lambda"]) == (p_at_1, 0.5)

    # a test split that would choose α 0, were it read: query 1's twins, labelled B (its text's nearest label)
    assert_test_split_unread(tmp_path, params, [B] * 4, [unit_of(e0=1)] * 4)

    refused = memory_stage(tmp_path, params)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().splitlines()[-1].startswith(f"ConfigError: {params}:memory.prototypes: ")
    (tmp_path / "no_alpha.json").write_text('{"keep": 0.5}')
    bad = memory_stage(tmp_path, params, choice=tmp_path / "no_alpha.json")
    assert bad.returncode == 2 and "no_alpha.json:prototypes: must be a number, got None" in bad.stderr
    assert not (tmp_path / "memory").exists()
    built = memory_stage(tmp_path, params, choice=tmp_path / "tune" / "memory_choice.json")
    assert built.returncode == 0, built.stderr
    meta = json.loads((tmp_path / "memory" / "memory.json").read_text())
    assert (meta["keep"], meta["prototypes"], meta["input_keys"]) == (0.5, 0.5, 5)
    assert (tmp_path / "memory" / "labels").is_dir(), "RAE's labels' index holds the prototypes"


@pytest.mark.parametrize(("memory", "choice"), [({"prototypes": 1}, {"keep": 0.5, "prototypes": 1.0}),
                                                ({"keep": 1.0}, {"keep": 1.0, "prototypes": 0.0})])
def test_a_numeric_alpha_and_auto_at_keep_1_are_not_searched(tmp_path, memory, choice):
    """α 1 stays as written (P@1 50 there, the curve's); at keep 1 auto is 0, the label texts' keys (P@1 50 as at
    α 0: no input key is ever retrieved). selection.json has no α fields then."""
    X, Z, Y = toy()
    write_training_split(tmp_path, X, Z, Y)
    proc = run_stage(tmp_path, toy_params(tmp_path, **memory))
    assert proc.returncode == 0, proc.stderr
    chosen = json.loads((tmp_path / "tune" / "selection.json").read_text())
    assert "prototypes" not in chosen and "prototypes_curve" not in chosen and "prototypes" not in chosen["auto"]
    assert chosen["val_value"] == 50.0
    assert json.loads((tmp_path / "tune" / "memory_choice.json").read_text()) == choice


def tuning(tmp_path, grid) -> MemoryTuning:
    return memory_tuning(tmp_path, *toy(), "hnsw", grid, lambda_grid=tuple(LAMBDAS), b=1, val_fraction=FRACTION,
                         val_seed=SEED)


def test_an_alpha_chosen_at_the_grids_largest_point_widens_it_by_doubling(tmp_path):
    """Grid [0, 0.25, 0.5]: 0.5 wins on its edge, so 1 is tried too (P@1 50: query 2 is lost); 0.5 still wins,
    off the edge now, so nothing more is tried."""
    retrieval, chosen = tuning(tmp_path, (0.0, 0.25, 0.5)).at(0.5)
    assert [(r["prototypes"], r["P@1"]) for r in chosen.prototypes_curve] == EXPECTED_CURVE[:4]
    assert chosen.prototypes == 0.5 and retrieval.input_keys == 4


def test_ties_go_to_the_smaller_alpha(tmp_path):
    """0.4, 0.5 and 0.6 all lie in (0.3, 0.7): P@1 100 each, and the smallest, nearest the label texts, wins (the
    smallest above 0 on its edge widens to 0.2: P@1 50)."""
    _, chosen = tuning(tmp_path, (0.4, 0.5, 0.6)).at(0.5)
    assert [(r["prototypes"], r["P@1"]) for r in chosen.prototypes_curve] \
        == [(0.2, 50.0), (0.4, 100.0), (0.5, 100.0), (0.6, 100.0)]
    assert chosen.prototypes == 0.4


def test_with_auto_keep_each_keep_is_judged_at_its_own_alpha_and_each_alpha_searched_once(tmp_path, monkeypatch):
    """Keep grid [1, 0.5]: keep 1 (auto α is 0 there: P@1 50) against keep 0.5 at its best α 0.5 (100); 0.5 wins on
    the grid's edge, so 0.25 is tried (at α 0.5: 100 again) and the tie goes to the larger keep. The labels' search
    at an α does not depend on the keep: five α over three keeps (keep 1's at α 0) search the labels five times."""
    searched = []
    real = memory_choice.label_search
    monkeypatch.setattr(memory_choice, "label_search", lambda *args: searched.append(args[-1]) or real(*args))
    retrieval, chosen = choose_keep(tuning(tmp_path, tuple(GRID)).at, (1.0, 0.5), "P@1")
    assert [(r["keep"], r.get("prototypes"), r["P@1"]) for r in chosen.keep_curve] \
        == [(1.0, None, 50.0), (0.5, 0.5, 100.0), (0.25, 0.5, 100.0)]
    assert (chosen.keep, chosen.prototypes, retrieval.input_keys) == (0.5, 0.5, 4)
    assert [(r["prototypes"], r["P@1"]) for r in chosen.prototypes_curve] == EXPECTED_CURVE
    assert sorted(searched) == [0, 0.25, 0.5, 1, 2]
