"""bench/cost_model.py's train stage: it costs the schedule the train stage resolves (fixed or auto), its work
formula against a hand-worked case, and its record agrees with the rule and bounds the measured steps."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from bench_scripts import BENCH, load_bench_module

from raexmc.training.schedule import Schedule

cost_model = load_bench_module("cost_model.py")


def test_the_cost_model_resolves_the_schedule_as_the_train_stage_does():
    # FOLDOC's 8,227 inputs under auto, by hand from the rule (docs/pipeline.md): 102.8 -> batch 128, lr 2e-4,
    # 12 x 8,227 / 128 = 771 -> 800 steps, warm-up 80, mining every ceil(800 / 3) = 267
    assert cost_model.train_settings("auto", 8_227).schedule == Schedule(128, pytest.approx(2e-4), 800, 80, 267)
    assert cost_model.train_settings("fixed", 8_227).schedule == Schedule(32, 1e-4, 300, 30, 100)
    # and gradient caching as the stage resolves it for MiniLM on a CPU (tests/training/test_schedule.py's hand
    # values): none for 32 inputs of 128 tokens, chunks of 75 for auto's 128
    assert cost_model.train_settings("fixed", 8_227).grad_cache_chunk == 0
    assert cost_model.train_settings("auto", 8_227).grad_cache_chunk == 75


def test_train_work_by_hand():
    """Width 2, one layer, every text 1 token: a text's work is 1 x 1 x (24 x 2² + 4 x 1 x 2) = 104."""
    tiny = cost_model.Encoder(width=2, layers=1)
    one_token = {"mean_tokens": 1.0, "batch_longest": {"32": 1.0}}
    data = {"N": 10, "L": 5, "train": one_token, "labels": one_token}
    settings = cost_model.train_settings("fixed", 10)   # batch 32, m = 2, 300 steps, a round every 100, uncached
    step, round_, rounds = cost_model.train_work(data, tiny, settings)
    assert step == 3 * 32 * (104 + 3 * 104)            # forward and backward of an input and its 3 labels
    assert round_ == (10 + 5) * 104                     # every training input and label re-embedded
    assert rounds == 3 + 1                              # steps 0, 100, 200, and the final validation
    chunked, _, _ = cost_model.train_work(data, tiny, replace(settings, grad_cache_chunk=8))
    assert chunked == 4 * 32 * (104 + 3 * 104)          # gradient caching: one more forward pass


def test_the_record_costs_the_rule_and_bounds_the_measured_steps():
    train = json.loads((BENCH / "results" / "cost_model.json").read_text())["train"]
    rows = {(r["dataset"], r["schedule"]): r for r in train["projections"]}
    for (dataset, mode), row in rows.items():
        schedule = cost_model.train_settings(mode, row["N"]).schedule
        assert (row["batch"], row["max_steps"], row["hnm_steps"]) == \
            (schedule.batch_size, schedule.max_steps, schedule.hnm_steps), f"{dataset} {mode}: rerun the cost model"
    assert rows[("foldoc", "auto")]["grad_cache_chunk"] == 75 and rows[("foldoc", "fixed")]["grad_cache_chunk"] == 0
    assert rows[("foldoc", "auto")]["wall_h"] > rows[("foldoc", "fixed")]["wall_h"]
    for check in train["checks"]:  # WordNet's runs, fitted on nothing: steps modelled high, rounds within 10%
        assert check["model_step_s"] >= check["step_s"]
        assert check["model_round_s"] == pytest.approx(check["round_s"], rel=0.1)
