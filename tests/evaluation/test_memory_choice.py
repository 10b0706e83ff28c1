"""`memory.keep: auto` and `memory.prototypes: auto` (evaluation/memory_choice.py): the tune stage chooses the keep,
and below keep 1 the label prototypes' α, on held-out training inputs (λ and τ chosen afresh at each), logs the
curve, never reads the test split, and the memory stage builds what it chose. keep_toy and alpha_toy work out why."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

import tune_helpers
from raexmc.data.held_out import split_validation
from raexmc.evaluation import memory_choice
from raexmc.evaluation.memory_choice import MemoryTuning, choose_keep
from raexmc.memory.key_selection import kept_count
from tests.helpers import write_params
from tune_helpers import (
    TAUS,
    assert_test_split_unread,
    memory_tuning,
    run_stage,
    tune_metrics,
    unit_rows,
    write_training_split,
)

SEED = 0
A, B, C, D, E = range(5)
KEEP_N, KEEP_FRACTION, KEEP_DIM = 40, 0.25, 48
CENTRE, OFFSET, A_KEY = 0, 41, 42   # the keep toy's axes; input i's own axis is 1 + i
W = 1                               # the keep toy's outlier's label (A is every other input's)
ALPHA_N, ALPHA_FRACTION, ALPHA_DIM = 10, 0.2, 16
ALPHA_LAMBDAS = [0.0, 0.5, 0.9]   # 0.5 and TAUS' 0.04 inside their grids: neither widens
ALPHA_GRID = [0, 0.25, 0.5, 1, 2]
ALPHA_CURVE = [(0.0, 50.0), (0.25, 50.0), (0.5, 100.0), (1.0, 50.0), (2.0, 50.0)]   # α, P@1: alpha_toy's arithmetic


def memory_stage(tmp_path, params, **choice):
    return run_stage(tmp_path, params, "memory", embeddings=tmp_path / "emb", out=tmp_path / "memory", **choice)


def randomly_kept(keep: float, rest: int) -> set[int]:
    """Positions among the `rest` memory inputs that memory.method random (seed SEED) keeps: its seeded draw."""
    count = kept_count(keep, rest)
    return set(np.random.default_rng(SEED).choice(rest, count, replace=False)) if count < rest else set(range(rest))


def keep_toy():
    """X, Z, Y and the outlier's row of the keep's toy: 40 training inputs around one centre c, each on its own axis
    (unit(c + e_i)); 10 are held out and query. Every input has label A but one, the "outlier", which sits at c itself
    with label W; label W's key is unit(c + 0.5·f), label A's is far from everything. A query's similarities are then
    1/√2 (0.707) to the outlier, 0.632 to W's key, 0.5 to every other input and 0 to A's key. With b = 2:
    - a memory holding the outlier retrieves it and W's key: W first at every λ and τ, so P@1 is 0 (the tie rule
      then keeps λ 0.5, τ 0.04);
    - a memory without it retrieves W's key and an input of A; A is first where λ·p_x > (1 − λ)·p_W, i.e.
      λ/(1 − λ) > exp(0.132/τ): at τ 0.1 from λ 0.79 (λ 0.9 is the pick nearest 0.5 with P@1 100, on τ's edge),
      widened to τ 0.2 from λ 0.66 (λ 0.7), and at τ 0.4 from λ 0.58 (λ 0.7 again: τ 0.2 is nearer 0.04).
    memory.method random keeps a seeded sample, so the outlier is placed where the seed's sample keeps it at 0.5 and
    drops it at 0.25 and 0.1: P@1 0, 0, 100, 100 at keep 1, 0.5, 0.25, 0.1, and the tie goes to the larger keep,
    0.25. The smaller keeps are judged at keep 1's τ 0.04, where A is first from λ 0.96 (λ 1), and the winner is then
    tuned in full (λ 0.7, τ 0.2). At λ fixed at 0.5 every keep would score 0: the keep is found only because λ is
    chosen at each."""
    rest_rows, _ = split_validation(sp.csr_matrix((KEEP_N, 2)), KEEP_FRACTION, SEED)
    position = min(randomly_kept(0.5, len(rest_rows)) - randomly_kept(0.25, len(rest_rows))
                   - randomly_kept(0.1, len(rest_rows)))
    outlier = int(rest_rows[position])
    X = np.zeros((KEEP_N, KEEP_DIM), dtype=np.float32)
    X[:, CENTRE] = 1.0
    X[np.arange(KEEP_N), 1 + np.arange(KEEP_N)] = 1.0
    X[outlier, 1 + outlier] = 0.0
    Z = np.zeros((2, KEEP_DIM), dtype=np.float32)
    Z[A, A_KEY] = 1.0
    Z[W, CENTRE], Z[W, OFFSET] = 1.0, 0.5
    labels = np.full(KEEP_N, A)
    labels[outlier] = W
    Y = sp.csr_matrix((np.ones(KEEP_N, dtype=np.float32), (np.arange(KEEP_N), labels)), shape=(KEEP_N, 2))
    return unit_rows(X).astype(np.float32), unit_rows(Z).astype(np.float32), Y, outlier


def keep_params(folder, keep="auto"):
    return write_params(folder, **{"infer.lambda": "auto", "infer.tau": "auto", "infer.tau_grid": TAUS,
                                   "infer.lambda_sweep": tune_helpers.LAMBDAS, "infer.b": 2,
                                   "infer.val_fraction": KEEP_FRACTION, "infer.val_folds": 1,  # one held-out set
                                   "memory.keep": keep, "memory.method": "random", "memory.seed": SEED})


KEEP_CURVE = [(1.0, 30, 0.5, 0.04, 0.0), (0.5, 15, 0.5, 0.04, 0.0), (0.25, 8, 0.7, 0.2, 100.0),
                  (0.1, 3, 1.0, 0.04, 100.0)]   # keep, input keys, λ, τ, P@1: keep_toy's arithmetic


@pytest.mark.slow  # several stage or torchrun processes: CI's second step
def test_auto_keep_chooses_the_smaller_memory_on_validation_alone_and_the_memory_stage_builds_it(tmp_path):
    """The choice and its logged curve; it is the selection a run at memory.keep 0.25 writes, plus the keep and its
    curve (a numeric keep's selection.json has no keep fields). With keep auto the memory stage builds the keep in
    memory_choice.json (of all 40 inputs: 10 keys); without that file it refuses in one line and writes nothing."""
    X, Z, Y, _ = keep_toy()
    write_training_split(tmp_path, X, Z, Y)  # no test split at all: the stage must not need one
    params = keep_params(tmp_path)
    proc = run_stage(tmp_path, params)
    assert proc.returncode == 0, proc.stderr
    assert "tune chose keep 0.25 joint λ 0.7 τ 0.2 (validation" in proc.stderr
    auto = chosen = json.loads((tmp_path / "tune" / "selection.json").read_text())
    assert (chosen["keep"], chosen["lambda"], chosen["tau"], chosen["val_value"]) == (0.25, 0.7, 0.2, 100.0)
    assert chosen["auto"] == {"lambda": True, "tau": True, "retrieval": True, "label_share": True, "keep": True}
    assert [(r["keep"], r["input_keys"], r["lambda"], r["tau"], r["P@1"]) for r in chosen["keep_curve"]] \
        == KEEP_CURVE
    assert (chosen["memory_inputs"], chosen["memory_input_keys"], chosen["val_queries"]) == (30, 8, 10)
    assert json.loads((tmp_path / "tune" / "memory_choice.json").read_text()) == {"keep": 0.25, "prototypes": 0.0}

    metrics = tune_metrics()
    assert metrics["tune/keep"] == 0.25
    for keep, keys, lam, tau, p_at_1 in KEEP_CURVE:
        assert (metrics[f"tune/keep_curve.{keep:g}.input_keys"], metrics[f"tune/keep_curve.{keep:g}.lambda"],
                metrics[f"tune/keep_curve.{keep:g}.tau"], metrics[f"tune/keep_curve.{keep:g}.P_at_1"]) \
            == (keys, lam, tau, p_at_1)
    # a test split that would choose the full memory, were it read: W's inputs where the outlier is the nearest key
    assert_test_split_unread(tmp_path, params, [W] * 10, [np.eye(KEEP_DIM)[CENTRE]] * 10)

    proc = run_stage(tmp_path, keep_params(tmp_path, keep=0.25))
    assert proc.returncode == 0, proc.stderr
    fixed = json.loads((tmp_path / "tune" / "selection.json").read_text())
    assert {k: v for k, v in auto.items() if k not in ("keep", "keep_curve")} \
        == {**fixed, "auto": {**fixed["auto"], "keep": True}}
    assert "keep" not in fixed and "keep" not in fixed["auto"]
    assert json.loads((tmp_path / "tune" / "memory_choice.json").read_text()) == {"keep": 0.25, "prototypes": 0.0}

    params = keep_params(tmp_path)
    refused = memory_stage(tmp_path, params)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().splitlines()[-1].startswith(f"ConfigError: {params}:memory.keep: memory.keep auto")
    assert not (tmp_path / "memory").exists()
    (tmp_path / "bad_keep.json").write_text('{"keep": 2}')
    bad = memory_stage(tmp_path, params, choice=tmp_path / "bad_keep.json")
    assert bad.returncode == 2 and "bad_keep.json:keep: must be less than or equal to 1, got 2" in bad.stderr
    built = memory_stage(tmp_path, params, choice=tmp_path / "tune" / "memory_choice.json")
    assert built.returncode == 0, built.stderr
    meta = json.loads((tmp_path / "memory" / "memory.json").read_text())
    assert (meta["keep"], meta["input_keys"], meta["num_inputs"]) == (0.25, 10, 40)


def keep_tuning(folder) -> tuple[MemoryTuning, int, int]:
    """The toy's memory tuning at a keep (λ and τ chosen afresh at each), its embeddings written under `folder`;
    the outlier's position among the memory inputs, and their count."""
    X, Z, Y, outlier = keep_toy()
    rest_rows, _ = split_validation(Y, KEEP_FRACTION, SEED)
    tuning = memory_tuning(folder, X, Z, Y, b=2, val_fraction=KEEP_FRACTION, val_seed=SEED)
    return tuning, int(np.searchsorted(rest_rows, outlier)), len(rest_rows)


def test_a_keep_chosen_at_the_grids_smallest_point_widens_it_by_halving(tmp_path):
    """Grid [1, 0.5, 0.25]: 0.25 wins on its edge, so 0.125 is tried too (4 keys of the 30: its P@1 is 100 where
    the seed's draw drops the outlier, 0 where it keeps it); 0.25 still wins (a tie goes to the larger keep), off
    the edge now, so nothing more is tried."""
    tuning, position, rest = keep_tuning(tmp_path)
    retrieval, chosen = choose_keep(tuning, (1.0, 0.5, 0.25))
    eighth = 0.0 if position in randomly_kept(0.125, rest) else 100.0
    assert [(r["keep"], r["input_keys"], r["P@1"]) for r in chosen.keep_curve] \
        == [(1.0, 30, 0.0), (0.5, 15, 0.0), (0.25, 8, 100.0), (0.125, 4, eighth)]
    assert chosen.keep == 0.25 and retrieval.input_keys == 8
    # the others at keep 1's τ and joint retrieval, the winner tuned in full on its own retrieval (keep_toy)
    assert [(r["keep"], r["tau"], r["label_share"]) for r in chosen.keep_curve] \
        == [(1.0, 0.04, None), (0.5, 0.04, None), (0.25, 0.2, None), (0.125, 0.04, None)]


def test_a_keep_chosen_at_the_grids_largest_point_widens_it_by_doubling_at_most_to_the_full_memory(tmp_path):
    """Grid [0.6, 0.5]: both memories hold the outlier (18 and 15 keys), so both score 0 and the tie goes to 0.6, on
    the grid's top edge; its double, 1.2, is more than every input, so the full memory (1.0) is tried instead, ties
    again and wins, and its own double is the full memory once more: nothing past 1 is ever tried."""
    tuning, position, rest = keep_tuning(tmp_path)
    assert all(position in randomly_kept(keep, rest) for keep in (0.6, 0.5))
    retrieval, chosen = choose_keep(tuning, (0.6, 0.5))
    assert [(r["keep"], r["input_keys"], r["P@1"]) for r in chosen.keep_curve] \
        == [(1.0, 30, 0.0), (0.6, 18, 0.0), (0.5, 15, 0.0)]
    assert chosen.keep == 1.0 and retrieval.input_keys == 30


def unit_of(**axes: float) -> np.ndarray:
    v = np.zeros(ALPHA_DIM)
    for axis, value in axes.items():
        v[int(axis[1:])] = value
    return v / np.linalg.norm(v)


def alpha_toy():
    """X, Z, Y of α's toy: 10 training inputs, 2 held out (they query), b = 1, so each query's P@1 is whether its
    single nearest key holds its label. Query 1 = e0 has label A, whose text key is e2⊥ (z_A = e1) and whose memory
    inputs unit(e0 ± 10·e4) sum to the direction e0: A's prototype unit(e1 + α·e0) is at α/√(1+α²) from the query.
    Label B has no inputs and sits at 0.3/√1.09 from it, so A is nearest iff α > 0.3 (A's inputs, at 1/√101, never
    are). Query 2 = e2 has label C, text key e2 itself and inputs summing to e3: C's prototype is at 1/√(1+α²), label
    D (no inputs) at 1/√1.49, so C is nearest iff α < 0.7. Over the grid [0, 0.25, 0.5, 1, 2] P@1 is then 50, 50,
    100, 50, 50: α 0.5 wins. With one key retrieved and no input key ever it, every λ < 1 ranks alike, so λ and τ go
    to the tie rule's 0.5 and 0.04."""
    rest_rows, held = split_validation(sp.csr_matrix((ALPHA_N, 5)), ALPHA_FRACTION, SEED)
    X, labels = np.zeros((ALPHA_N, ALPHA_DIM)), np.full(ALPHA_N, E)
    X[held[0]], labels[held[0]] = unit_of(e0=1), A
    X[held[1]], labels[held[1]] = unit_of(e2=1), C
    members = [(unit_of(e0=1, e4=10), A), (unit_of(e0=1, e4=-10), A), (unit_of(e3=1, e5=10), C),
               (unit_of(e3=1, e5=-10), C), *((unit_of(e8=1, **{f"e{9 + i}": 1}), E) for i in range(4))]
    for row, (key, label) in zip(rest_rows, members):
        X[row], labels[row] = key, label
    c1, c2 = 0.3 / np.sqrt(1.09), 1 / np.sqrt(1.49)
    Z = np.array([unit_of(e1=1), unit_of(e0=c1, e6=np.sqrt(1 - c1 ** 2)), unit_of(e2=1),
                  unit_of(e2=c2, e7=np.sqrt(1 - c2 ** 2)), unit_of(e8=1)])
    Y = sp.csr_matrix((np.ones(ALPHA_N), (np.arange(ALPHA_N), labels)), shape=(ALPHA_N, 5))
    return X.astype(np.float32), Z.astype(np.float32), Y


def alpha_params(folder, **memory):
    return write_params(folder, **{"infer.lambda": "auto", "infer.tau": "auto", "infer.lambda_sweep": ALPHA_LAMBDAS,
                                   "infer.tau_grid": TAUS, "infer.b": 1, "infer.val_fraction": ALPHA_FRACTION,
                                   "infer.val_seed": SEED, "infer.val_folds": 1,  # the toy holds out one set
                                   "memory.keep": 0.5, "memory.method": "random", "memory.seed": SEED,
                                   "memory.prototypes": "auto", "memory.prototypes_grid": ALPHA_GRID,
                                   **{f"memory.{key}": value for key, value in memory.items()},
                                   "index.backend": "hnsw"})  # prototypes need graphs; auto would search exactly


@pytest.mark.slow  # several stage or torchrun processes: CI's second step
def test_auto_prototypes_choose_alpha_on_validation_alone_and_the_memory_stage_builds_it(tmp_path):
    X, Z, Y = alpha_toy()
    write_training_split(tmp_path, X, Z, Y)  # no test split at all: the stage must not need one
    params = alpha_params(tmp_path)
    proc = run_stage(tmp_path, params)
    assert proc.returncode == 0, proc.stderr
    assert "α 0.5 joint λ 0.5 τ 0.04 (validation" in proc.stderr and "tune chose " in proc.stderr
    chosen = json.loads((tmp_path / "tune" / "selection.json").read_text())
    assert (chosen["prototypes"], chosen["lambda"], chosen["tau"], chosen["val_value"]) == (0.5, 0.5, 0.04, 100.0)
    assert chosen["auto"] == {"lambda": True, "tau": True, "retrieval": True, "label_share": True, "prototypes": True}
    assert [(r["prototypes"], r["P@1"]) for r in chosen["prototypes_curve"]] == ALPHA_CURVE
    assert {(r["lambda"], r["tau"], r["input_keys"]) for r in chosen["prototypes_curve"]} == {(0.5, 0.04, 4)}
    assert json.loads((tmp_path / "tune" / "memory_choice.json").read_text()) == {"keep": 0.5, "prototypes": 0.5}

    metrics = tune_metrics()
    assert metrics["tune/prototypes"] == 0.5
    for weight, p_at_1 in ALPHA_CURVE:
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
    X, Z, Y = alpha_toy()
    write_training_split(tmp_path, X, Z, Y)
    proc = run_stage(tmp_path, alpha_params(tmp_path, **memory))
    assert proc.returncode == 0, proc.stderr
    chosen = json.loads((tmp_path / "tune" / "selection.json").read_text())
    assert "prototypes" not in chosen and "prototypes_curve" not in chosen and "prototypes" not in chosen["auto"]
    assert chosen["val_value"] == 50.0
    assert json.loads((tmp_path / "tune" / "memory_choice.json").read_text()) == choice


def alpha_tuning(tmp_path, grid) -> MemoryTuning:
    return memory_tuning(tmp_path, *alpha_toy(), "hnsw", grid, lambda_grid=tuple(ALPHA_LAMBDAS), b=1,
                         val_fraction=ALPHA_FRACTION, val_seed=SEED)


def test_an_alpha_chosen_at_the_grids_largest_point_widens_it_by_doubling(tmp_path):
    """Grid [0, 0.25, 0.5]: 0.5 wins on its edge, so 1 is tried too (P@1 50: query 2 is lost); 0.5 still wins,
    off the edge now, so nothing more is tried."""
    retrieval, chosen = alpha_tuning(tmp_path, (0.0, 0.25, 0.5)).at(0.5)
    assert [(r["prototypes"], r["P@1"]) for r in chosen.prototypes_curve] == ALPHA_CURVE[:4]
    assert chosen.prototypes == 0.5 and retrieval.input_keys == 4


def test_ties_go_to_the_smaller_alpha(tmp_path):
    """0.4, 0.5 and 0.6 all lie in (0.3, 0.7): P@1 100 each, and the smallest, nearest the label texts, wins (the
    smallest above 0 on its edge widens to 0.2: P@1 50)."""
    _, chosen = alpha_tuning(tmp_path, (0.4, 0.5, 0.6)).at(0.5)
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
    retrieval, chosen = choose_keep(alpha_tuning(tmp_path, tuple(ALPHA_GRID)), (1.0, 0.5))
    assert [(r["keep"], r.get("prototypes"), r["P@1"]) for r in chosen.keep_curve] \
        == [(1.0, None, 50.0), (0.5, 0.5, 100.0), (0.25, 0.5, 100.0)]
    assert (chosen.keep, chosen.prototypes, retrieval.input_keys) == (0.5, 0.5, 4)
    assert [(r["prototypes"], r["P@1"]) for r in chosen.prototypes_curve] == ALPHA_CURVE
    assert sorted(searched) == [0, 0.25, 0.5, 1, 2]
