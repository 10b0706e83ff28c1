"""`memory.keep: auto`: the tune stage chooses the keep on held-out training inputs (λ and τ chosen afresh at each),
logs the keep curve, never reads the test split, and the memory stage builds the keep it chose.

The toy: 40 training inputs around one centre c, each on its own axis (unit(c + e_i)); 10 are held out and query.
Every input has label A but one, the "outlier", which sits at c itself with label W; label W's key is
unit(c + 0.5·f), label A's is far from everything. A query's similarities are then 1/√2 (0.707) to the outlier,
0.632 to W's key, 0.5 to every other input and 0 to A's key. With b = 2:
- a memory holding the outlier retrieves it and W's key: W first at every λ and τ, so P@1 is 0 (the tie rule
  then keeps λ 0.5, τ 0.04);
- a memory without it retrieves W's key and an input of A; A is first where λ·p_x > (1 − λ)·p_W, i.e.
  λ/(1 − λ) > exp(0.132/τ): at τ 0.1 from λ 0.79 (λ 0.9 is the pick nearest 0.5 with P@1 100, on τ's edge),
  widened to τ 0.2 from λ 0.66 (λ 0.7), and at τ 0.4 from λ 0.58 (λ 0.7 again: τ 0.2 is nearer 0.04).
memory.method random keeps a seeded sample, so the outlier is placed where the seed's sample keeps it at 0.5 and
drops it at 0.25 and 0.1: P@1 0, 0, 100, 100 at keep 1, 0.5, 0.25, 0.1, and the tie goes to the larger keep, 0.25.
At λ fixed at 0.5 every keep would score 0: the keep is found only because λ and τ are chosen at each.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

import tune_helpers
from raexmc.data.held_out import split_validation
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

N, FRACTION, SEED = 40, 0.25, 0
CENTRE, OFFSET, A_KEY = 0, 41, 42   # axes; input i's own axis is 1 + i
DIM = 48
A, W = 0, 1


def randomly_kept(keep: float, rest: int) -> set[int]:
    """Positions among the `rest` memory inputs that memory.method random (seed SEED) keeps: its seeded draw."""
    count = kept_count(keep, rest)
    return set(np.random.default_rng(SEED).choice(rest, count, replace=False)) if count < rest else set(range(rest))


def toy():
    """X, Z, Y of the module's toy, and the outlier's row: kept by random at keep 0.5, dropped at 0.25 and 0.1."""
    rest_rows, _ = split_validation(sp.csr_matrix((N, 2)), FRACTION, SEED)
    position = min(randomly_kept(0.5, len(rest_rows)) - randomly_kept(0.25, len(rest_rows))
                   - randomly_kept(0.1, len(rest_rows)))
    outlier = int(rest_rows[position])
    X = np.zeros((N, DIM), dtype=np.float32)
    X[:, CENTRE] = 1.0
    X[np.arange(N), 1 + np.arange(N)] = 1.0
    X[outlier, 1 + outlier] = 0.0
    Z = np.zeros((2, DIM), dtype=np.float32)
    Z[A, A_KEY] = 1.0
    Z[W, CENTRE], Z[W, OFFSET] = 1.0, 0.5
    labels = np.full(N, A)
    labels[outlier] = W
    Y = sp.csr_matrix((np.ones(N, dtype=np.float32), (np.arange(N), labels)), shape=(N, 2))
    return unit_rows(X).astype(np.float32), unit_rows(Z).astype(np.float32), Y, outlier


def toy_params(folder, keep="auto"):
    return write_params(folder, **{"infer.lambda": "auto", "infer.tau": "auto", "infer.tau_grid": TAUS,
                                   "infer.lambda_sweep": tune_helpers.LAMBDAS, "infer.b": 2,
                                   "infer.val_fraction": FRACTION, "infer.val_folds": 1,  # the toy holds out one set
                                   "memory.keep": keep, "memory.method": "random", "memory.seed": SEED})


EXPECTED_CURVE = [(1.0, 30, 0.5, 0.04, 0.0), (0.5, 15, 0.5, 0.04, 0.0), (0.25, 8, 0.7, 0.2, 100.0),
                  (0.1, 3, 0.7, 0.2, 100.0)]   # keep, input keys, λ, τ, P@1: the module docstring's arithmetic


@pytest.mark.slow  # several stage or torchrun processes: CI's second step
def test_auto_keep_chooses_the_smaller_memory_on_validation_alone_and_logs_its_curve(tmp_path):
    X, Z, Y, _ = toy()
    write_training_split(tmp_path, X, Z, Y)  # no test split at all: the stage must not need one
    params = toy_params(tmp_path)
    proc = run_stage(tmp_path, params)
    assert proc.returncode == 0, proc.stderr
    assert "tune chose keep 0.25 joint λ 0.7 τ 0.2 (validation" in proc.stderr
    chosen = json.loads((tmp_path / "tune" / "selection.json").read_text())
    assert (chosen["keep"], chosen["lambda"], chosen["tau"], chosen["val_value"]) == (0.25, 0.7, 0.2, 100.0)
    assert chosen["auto"] == {"lambda": True, "tau": True, "retrieval": True, "label_share": True, "keep": True}
    assert [(r["keep"], r["input_keys"], r["lambda"], r["tau"], r["P@1"]) for r in chosen["keep_curve"]] \
        == EXPECTED_CURVE
    assert (chosen["memory_inputs"], chosen["memory_input_keys"], chosen["val_queries"]) == (30, 8, 10)
    assert json.loads((tmp_path / "tune" / "memory_choice.json").read_text()) == {"keep": 0.25, "prototypes": 0.0}

    metrics = tune_metrics()
    assert metrics["tune/keep"] == 0.25
    for keep, keys, lam, tau, p_at_1 in EXPECTED_CURVE:
        assert (metrics[f"tune/keep_curve.{keep:g}.input_keys"], metrics[f"tune/keep_curve.{keep:g}.lambda"],
                metrics[f"tune/keep_curve.{keep:g}.tau"], metrics[f"tune/keep_curve.{keep:g}.P_at_1"]) \
            == (keys, lam, tau, p_at_1)
    # a test split that would choose the full memory, were it read: W's inputs where the outlier is the nearest key
    assert_test_split_unread(tmp_path, params, [W] * 10, [np.eye(DIM)[CENTRE]] * 10)


@pytest.mark.slow  # several stage or torchrun processes: CI's second step
def test_the_chosen_keep_is_what_a_numeric_keep_chooses_there(tmp_path):
    """The choice at keep auto is the selection a run at memory.keep 0.25 writes, plus the keep and its curve;
    a numeric keep's selection.json has no keep fields, and its memory_choice.json holds that number."""
    X, Z, Y, _ = toy()
    write_training_split(tmp_path, X, Z, Y)
    assert run_stage(tmp_path, toy_params(tmp_path)).returncode == 0
    auto = json.loads((tmp_path / "tune" / "selection.json").read_text())
    proc = run_stage(tmp_path, toy_params(tmp_path, keep=0.25))
    assert proc.returncode == 0, proc.stderr
    fixed = json.loads((tmp_path / "tune" / "selection.json").read_text())
    assert {k: v for k, v in auto.items() if k not in ("keep", "keep_curve")} \
        == {**fixed, "auto": {**fixed["auto"], "keep": True}}
    assert "keep" not in fixed and "keep" not in fixed["auto"]
    assert json.loads((tmp_path / "tune" / "memory_choice.json").read_text()) == {"keep": 0.25, "prototypes": 0.0}


def toy_tuning(folder) -> tuple[MemoryTuning, int, int]:
    """The toy's memory tuning at a keep (λ and τ chosen afresh at each), its embeddings written under `folder`;
    the outlier's position among the memory inputs, and their count."""
    X, Z, Y, outlier = toy()
    rest_rows, _ = split_validation(Y, FRACTION, SEED)
    tuning = memory_tuning(folder, X, Z, Y, b=2, val_fraction=FRACTION, val_seed=SEED)
    return tuning, int(np.searchsorted(rest_rows, outlier)), len(rest_rows)


def test_a_keep_chosen_at_the_grids_smallest_point_widens_it_by_halving(tmp_path):
    """Grid [1, 0.5, 0.25]: 0.25 wins on its edge, so 0.125 is tried too (4 keys of the 30: its P@1 is 100 where
    the seed's draw drops the outlier, 0 where it keeps it); 0.25 still wins (a tie goes to the larger keep), off
    the edge now, so nothing more is tried."""
    tuning, position, rest = toy_tuning(tmp_path)
    retrieval, chosen = choose_keep(tuning.at, (1.0, 0.5, 0.25), "P@1")
    eighth = 0.0 if position in randomly_kept(0.125, rest) else 100.0
    assert [(r["keep"], r["input_keys"], r["P@1"]) for r in chosen.keep_curve] \
        == [(1.0, 30, 0.0), (0.5, 15, 0.0), (0.25, 8, 100.0), (0.125, 4, eighth)]
    assert chosen.keep == 0.25 and retrieval.input_keys == 8


def test_a_keep_chosen_at_the_grids_largest_point_widens_it_by_doubling_at_most_to_the_full_memory(tmp_path):
    """Grid [0.6, 0.5]: both memories hold the outlier (18 and 15 keys), so both score 0 and the tie goes to 0.6, on
    the grid's top edge; its double, 1.2, is more than every input, so the full memory (1.0) is tried instead, ties
    again and wins, and its own double is the full memory once more: nothing past 1 is ever tried."""
    tuning, position, rest = toy_tuning(tmp_path)
    assert all(position in randomly_kept(keep, rest) for keep in (0.6, 0.5))
    retrieval, chosen = choose_keep(tuning.at, (0.6, 0.5), "P@1")
    assert [(r["keep"], r["input_keys"], r["P@1"]) for r in chosen.keep_curve] \
        == [(1.0, 30, 0.0), (0.6, 18, 0.0), (0.5, 15, 0.0)]
    assert chosen.keep == 1.0 and retrieval.input_keys == 30


@pytest.mark.slow  # several stage or torchrun processes: CI's second step
def test_the_memory_stage_builds_the_chosen_keep(tmp_path):
    """With keep auto the memory stage builds the keep in the tune stage's memory_choice.json (of all 40 inputs:
    10 keys); without that file it refuses in one line naming memory.keep, and writes nothing."""
    X, Z, Y, _ = toy()
    write_training_split(tmp_path, X, Z, Y)
    params = toy_params(tmp_path)
    (tmp_path / "memory_choice.json").write_text('{"keep": 0.25, "prototypes": 0.0}')

    def memory_stage(**choice):
        return run_stage(tmp_path, params, "memory", embeddings=tmp_path / "emb", out=tmp_path / "memory", **choice)

    refused = memory_stage()
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().splitlines()[-1].startswith(f"ConfigError: {params}:memory.keep: memory.keep auto")
    assert not (tmp_path / "memory").exists()
    (tmp_path / "bad_keep.json").write_text('{"keep": 2}')
    bad = memory_stage(choice=tmp_path / "bad_keep.json")
    assert bad.returncode == 2 and "bad_keep.json:keep: must be less than or equal to 1, got 2" in bad.stderr
    built = memory_stage(choice=tmp_path / "memory_choice.json")
    assert built.returncode == 0, built.stderr
    meta = json.loads((tmp_path / "memory" / "memory.json").read_text())
    assert (meta["keep"], meta["input_keys"], meta["num_inputs"]) == (0.25, 10, 40)
