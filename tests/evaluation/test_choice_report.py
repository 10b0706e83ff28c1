"""The tune stage's choice as MLflow metrics and as its one line, on a hand-made selection."""

from __future__ import annotations

from raexmc.evaluation.choice_report import choice_line, choice_metrics
from raexmc.evaluation.selection_file import Selection
from tests.helpers import selection_record

KEEP_CURVE = [{"keep": 0.5, "lambda": 0.5, "tau": 0.04, "label_share": None, "P@1": 0.61},
              {"keep": 1.0, "lambda": 0.3, "tau": 0.1, "label_share": 0.25, "P@1": 0.6}]
# λ auto, τ fixed at 0.04, retrieval auto: joint won at 0.61; split's best at τ 0.04 is 0.59 (its 0.7 is at τ 0.1)
VALIDATION = [{"lambda": 0.5, "tau": 0.04, "label_share": None, "P@1": 0.61},
              {"lambda": 0.3, "tau": 0.04, "label_share": 0.25, "P@1": 0.59},
              {"lambda": 0.9, "tau": 0.04, "label_share": 0.75, "P@1": 0.55},
              {"lambda": 0.9, "tau": 0.1, "label_share": 0.75, "P@1": 0.7}]
RECORD = selection_record(keep=0.5, keep_curve=KEEP_CURVE, validation=VALIDATION,
                          auto={"lambda": True, "tau": False, "retrieval": True, "label_share": True, "keep": True},
                          baselines={"knn": {"tau": 0.02, "auto": {"tau": True},
                                             "validation": [{"tau": 0.02, "P@1": 0.4}]}})
SELECTION = Selection.model_validate(RECORD)


def test_the_metrics_hold_the_choice_its_curve_by_point_and_knns_tau_and_the_line_names_each_alternative():
    assert choice_metrics(SELECTION) == {
        **{k: v for k, v in RECORD.items() if k not in ("validation", "keep_curve", "baselines")},
        "keep_curve": {"0.5": {k: v for k, v in KEEP_CURVE[0].items() if k != "keep"},
                       "1": {k: v for k, v in KEEP_CURVE[1].items() if k != "keep"}},
        "baselines": {"knn": {"tau": 0.02, "auto": {"tau": True}}}}
    assert choice_line(SELECTION) == (
        "tune chose keep 0.5 joint λ 0.5 τ 0.04 (validation P@1 0.61; split share 0.25 λ 0.3 τ 0.04: 0.59; "
        "keep 1 split share 0.25 λ 0.3 τ 0.1: 0.6; fixed joint λ 0.5 τ 0.04: 0.58); kNN τ 0.02")
    split = Selection.model_validate(selection_record(
        retrieval="split", label_share=0.25, prototypes=0.3, fixed_label_share=0.5,
        validation=[{"lambda": 0.5, "tau": 0.04, "label_share": 0.25, "P@1": 0.61}],
        prototypes_curve=[{"prototypes": 0.0, "lambda": 0.1, "tau": 0.02, "label_share": 0.5, "P@1": 0.57},
                          {"prototypes": 0.3, "lambda": 0.5, "tau": 0.04, "label_share": 0.25, "P@1": 0.61}]))
    assert choice_line(split) == (
        "tune chose α 0.3 split share 0.25 λ 0.5 τ 0.04 (validation P@1 0.61; α 0 split share 0.5 λ 0.1 τ 0.02: 0.57; "
        "fixed split share 0.5 λ 0.5 τ 0.04: 0.58); kNN τ 0.04")
