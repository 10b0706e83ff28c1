"""The tune stage's choice as MLflow metrics and as its one line, on a hand-made selection."""

from __future__ import annotations

from raexmc.evaluation.choice_report import choice_line, choice_metrics
from raexmc.evaluation.selection_file import Selection
from tests.helpers import selection_record

RECORD = selection_record(keep=0.5, keep_curve=[{"keep": 0.5, "P@1": 0.61}, {"keep": 1.0, "P@1": 0.6}],
                          baselines={"knn": {"tau": 0.02, "auto": {"tau": True},
                                             "validation": [{"tau": 0.02, "P@1": 0.4}]}})
SELECTION = Selection.model_validate(RECORD)
FIT = {"uses_model": False, "cv_gain": -0.01}


def test_the_metrics_hold_the_choice_its_curve_by_point_and_knns_tau_without_rows():
    assert choice_metrics(SELECTION, FIT) == {
        **{k: v for k, v in RECORD.items() if k not in ("validation", "keep_curve", "baselines")},
        "keep_curve": {"0.5": {"P@1": 0.61}, "1": {"P@1": 0.6}},
        "baselines": {"knn": {"tau": 0.02, "auto": {"tau": True}}},
        "query_lambda": {"uses_model": 0, "cv_gain": -0.01}}


def test_the_line_names_the_keep_only_where_it_was_chosen():
    assert choice_line(SELECTION, FIT, 0.5, chose_keep=True) == (
        "chose keep=0.5 lambda=0.5 tau=0.04 retrieval=joint (validation P@1 0.61, 0.58 at the fixed values); "
        "kNN tau=0.02; per-query lambda: falls back to 0.5")
    split = SELECTION.with_(retrieval="split", label_share=0.25, prototypes=0.3)
    assert choice_line(split, {**FIT, "uses_model": True}, 0.5, chose_keep=False) == (
        "chose prototypes=0.3 lambda=0.5 tau=0.04 retrieval=split label_share=0.25 (validation P@1 0.61, 0.58 at "
        "the fixed values); kNN tau=0.02; per-query lambda: a model")
