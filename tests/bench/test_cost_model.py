"""bench/cost_model.py's GPU column: one H100's seconds per stage from given rates (expected values worked by
hand from the shapes' counts), and the rates read from their records, the search's labelled as an assumption."""

from __future__ import annotations

import pytest

from bench_scripts import load_bench_module

RATES = {"embed_texts_per_s": {"values": {"MiniLM-L6 (384)": 100_000.0}},
         "train_examples_per_s": {"values": {"MiniLM-L6 (384)": 7_168.0}},
         "search_flops_per_s": {"value": 1e12}}


@pytest.fixture(scope="module")
def cost_model():
    return load_bench_module("cost_model.py")


def test_gpu_seconds_from_given_rates(cost_model):
    seconds = cost_model.gpu_seconds
    # 131K: 294,805 + 134,835 + 131,073 = 560,713 texts at 100,000 texts/s
    assert seconds("embed", "131K", "MiniLM-L6 (384)", RATES) == pytest.approx(5.60713)
    # the preset's 3,000 steps of 7,168 at 7,168 examples/s; 1.3M: 40,000 steps
    assert seconds("train (preset)", "131K", "MiniLM-L6 (384)", RATES) == pytest.approx(3000)
    assert seconds("train (preset)", "1.3M", "MiniLM-L6 (384)", RATES) == pytest.approx(40000)
    # tune: Q = 5% of 294,805 = 14,740 queries x (294,805 + 131,073 = 425,878) keys x 2·384 FLOPs at 1 TFLOP/s
    assert seconds("tune", "131K", "MiniLM-L6 (384)", RATES) == pytest.approx(14_740 * 425_878 * 768 / 1e12)
    assert 14_740 * 425_878 * 768 == 4_821_075_240_960
    # evaluate: 970,237 test queries x (2,248,619 + 1,305,265 = 3,553,884) keys x 2·768 FLOPs
    assert seconds("evaluate", "1.3M", "BERT-base (768)", RATES) == pytest.approx(970_237 * 3_553_884 * 1536 / 1e12)
    # no rate measured for the encoder, or no GPU work in the stage: no figure
    assert seconds("embed", "131K", "BERT-base (768)", RATES) is None
    assert seconds("train (preset)", "1.3M", "random 64x2", RATES) is None
    assert seconds("index", "1.3M", "MiniLM-L6 (384)", RATES) is None


def test_the_rates_come_from_their_records_and_the_search_rate_is_labelled_assumed(cost_model):
    rates = cost_model.gpu_rates()
    # the H100 rows of embed_speed.json (batch 1024) and train_speed.json (896 per GPU, no gradient cache)
    assert rates["embed_texts_per_s"]["values"] == {"MiniLM-L6 (384)": pytest.approx((100466.2 + 113994.3) / 2)}
    assert rates["train_examples_per_s"]["values"] == {"MiniLM-L6 (384)": pytest.approx((10624.3 + 10848.4) / 2),
                                                      "DistilBERT (768)": pytest.approx(4613.8)}
    search = rates["search_flops_per_s"]
    assert search["value"] == pytest.approx(0.25 * 989.5e12) and search["measured"] is False
    assert "not yet measured" in search["assumption"] and "gpu_search.json" in search["replaced_by"]


@pytest.mark.parametrize("seconds, text", [(0.02, "0.02 s"), (5.6, "5.6 s"), (42.4, "42 s"), (2004, "33.4 min"),
                                           (26_700, "7.4 h")])
def test_durations_read_as_a_table_shows_them(cost_model, seconds, text):
    assert cost_model.duration(seconds) == text
