"""scripts/cost_model.py. The train stage: it costs the schedule the train stage resolves (fixed or auto), its work
formula against a hand-worked case, and its record agrees with the rule and bounds the measured steps. The GPU
column: one H100's seconds per stage from given rates (expected values worked by hand from the shapes' counts),
and the rates read from their records."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from raexmc.training.schedule import Schedule
from tests.helpers import REPO, load_module

cost_model = load_module(REPO / "scripts/cost_model.py")


def test_the_cost_model_resolves_the_schedule_as_the_train_stage_does_and_its_work_by_hand():
    # FOLDOC's 8,227 inputs under auto, by hand from the rule (docs/pipeline.md): 102.8 -> batch 128, lr 2e-4,
    # 12 x 8,227 / 128 = 771 -> 800 steps, warm-up 80, mining every ceil(800 / 3) = 267
    assert cost_model.train_settings("auto", 8_227).schedule == Schedule(128, pytest.approx(2e-4, abs=1e-12), 800, 80,
                                                                          267)
    assert cost_model.train_settings("fixed", 8_227).schedule == Schedule(32, 1e-4, 300, 30, 100)
    # and gradient caching as the stage resolves it for MiniLM on a CPU (tests/training/test_schedule.py's hand
    # values): none for 32 inputs of 128 tokens, chunks of 75 for auto's 128
    assert cost_model.train_settings("fixed", 8_227).grad_cache_chunk == 0
    assert cost_model.train_settings("auto", 8_227).grad_cache_chunk == 75
    # the train work by hand. Width 2, one layer, every text 1 token: a text's work is 1 x 1 x (24 x 2² + 4 x 1 x 2)
    # = 104
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
    train = json.loads((REPO / "bench" / "results" / "cost_model.json").read_text())["train"]
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


# --- the GPU column ---------------------------------------------------------------------------------------

RATES = {"embed_texts_per_s": {"values": {"MiniLM-L6 (384)": 100_000.0}},
         "train_examples_per_s": {"values": {"MiniLM-L6 (384)": 7_168.0}},
         "search_flops_per_s": {"value": 1e12}}


def test_gpu_seconds_from_given_rates():
    seconds = cost_model.gpu_seconds
    # 131K: 294,805 + 134,835 + 131,073 = 560,713 texts at 100,000 texts/s
    assert seconds("embed", "131K", "MiniLM-L6 (384)", RATES) == pytest.approx(5.60713, abs=1e-9)
    # the preset's 3,000 steps of 7,168 at 7,168 examples/s; 1.3M: 40,000 steps
    assert seconds("train (preset)", "131K", "MiniLM-L6 (384)", RATES) == pytest.approx(3000, abs=1e-6)
    assert seconds("train (preset)", "1.3M", "MiniLM-L6 (384)", RATES) == pytest.approx(40000, abs=1e-6)
    # tune: Q = 5% of 294,805 = 14,740 queries x (294,805 + 131,073 = 425,878) keys x 2·384 FLOPs at 1 TFLOP/s
    assert seconds("tune", "131K", "MiniLM-L6 (384)", RATES) == pytest.approx(14_740 * 425_878 * 768 / 1e12, abs=1e-6)
    assert 14_740 * 425_878 * 768 == 4_821_075_240_960
    # evaluate: 970,237 test queries x (2,248,619 + 1,305,265 = 3,553,884) keys x 2·768 FLOPs
    assert seconds("evaluate", "1.3M", "BERT-base (768)", RATES) == pytest.approx(970_237 * 3_553_884 * 1536 / 1e12,
                                                                                 abs=1e-6)
    # no rate measured for the encoder, or no GPU work in the stage: no figure
    assert seconds("embed", "131K", "BERT-base (768)", RATES) is None
    assert seconds("train (preset)", "1.3M", "random 64x2", RATES) is None
    assert seconds("index", "1.3M", "MiniLM-L6 (384)", RATES) is None


def test_the_rates_come_from_their_records():
    rates = cost_model.gpu_rates()
    # the H100 rows of embed_speed.json (batch 1024) and train_speed.json (896 per GPU, no gradient cache)
    assert rates["embed_texts_per_s"]["values"] == {
        "MiniLM-L6 (384)": pytest.approx((100466.2 + 113994.3) / 2, abs=1e-6)}
    assert rates["train_examples_per_s"]["values"] == {
        "MiniLM-L6 (384)": pytest.approx((10624.3 + 10848.4) / 2, abs=1e-6),
        "DistilBERT (768)": pytest.approx(4613.8, abs=1e-6)}
    search = rates["search_flops_per_s"]
    # the 1.3M chain's largest tune search on the H200: 2,136,188 keys of 384, 30,951.4 queries/s, 2 FLOPs a dimension
    assert search["value"] == pytest.approx(2 * 384 * 2_136_188 * 30_951.4, abs=1.0)
    assert search["device"].startswith("NVIDIA H200")


@pytest.mark.parametrize("seconds, text", [(0.02, "0.02 s"), (5.6, "5.6 s"), (42.4, "42 s"), (2004, "33.4 min"),
                                           (26_700, "7.4 h")])
def test_durations_read_as_a_table_shows_them(seconds, text):
    assert cost_model.duration(seconds) == text
