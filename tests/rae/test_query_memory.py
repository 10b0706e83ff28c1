"""A huge query costs the predictor no more memory than its cut to the token budget: the tokenizer
never sees more than tokenize.input_max_len tokens' worth of characters."""

from __future__ import annotations

import sys

from test_predictor import build_pipeline
from tests.helpers import peak_rss_of

PREDICT_ONE = """
import sys
from pathlib import Path
from raexmc.rae.model import RaeModel
folder = Path(sys.argv[1])
predictor = RaeModel.load(folder / "predictor")
predictor.predict(["python unix compiler " * int(sys.argv[2])], k=3)
"""


def test_a_10_mb_query_costs_no_more_memory_than_a_short_one(tmp_path, lf_folder, tiny_model):
    built = build_pipeline(tmp_path, lf_folder, tiny_model, "exact")
    short, huge = (peak_rss_of([sys.executable, "-c", PREDICT_ONE, str(built), str(repeats)], tmp_path) / 2**20
                   for repeats in (1, 500_000))  # 21 characters and 10.5 MB
    assert huge - short < 50, f"peak RSS {short:.0f} MiB for a short query, {huge:.0f} MiB for a 10 MB one"
