"""The headline rows DVC shows: RAE's and its baselines' key metrics (RAE's with λ and τ, kNN's with its τ), p-values
as text."""

from __future__ import annotations

import json

from raexmc.pipeline.results import method_rows, p_value_rows, write_rows

KEYS = ("P@1", "P@5", "nDCG@5", "PSP@5", "R@100")


def summary(base: float) -> dict:
    """A method's metrics.json entry: the headline five plus what the full table also holds."""
    return {**{key: base + i for i, key in enumerate(KEYS)}, "P@3": 1.0, "macro-F1@5": {"tail": 2.0}}


def test_rae_and_its_baselines_each_get_a_row_of_five_metrics_rae_s_with_lambda_and_tau_knn_s_with_its_tau():
    metrics = {"rae": summary(50), "dual_encoder": summary(30), "knn": {**summary(40), "tau": 0.2},
               "rae_query_lambda": summary(51), "selection": {"lambda": 0.3, "tau": 0.04, "metric": "P@1"},
               "retrieval": {"depth": 200}, "memory": {"keep": 1.0}}
    assert method_rows(metrics) == {
        "rae": {"P@1": 50, "P@5": 51, "nDCG@5": 52, "PSP@5": 53, "R@100": 54, "lambda": 0.3, "tau": 0.04},
        "dual_encoder": {"P@1": 30, "P@5": 31, "nDCG@5": 32, "PSP@5": 33, "R@100": 34},
        "knn": {"P@1": 40, "P@5": 41, "nDCG@5": 42, "PSP@5": 43, "R@100": 44, "tau": 0.2}}


def test_knn_s_row_of_a_metrics_json_without_its_tau_has_rae_s_the_one_it_was_scored_at():
    metrics = {"rae": summary(50), "dual_encoder": summary(30), "knn": summary(40),
               "selection": {"lambda": 0.3, "tau": 0.07, "metric": "P@1"}}
    assert method_rows(metrics)["knn"]["tau"] == 0.07


def test_rae_against_each_baseline_gets_a_row_of_p_values_as_text(tmp_path):
    report = {"rae_vs_dual_encoder": {"P@1": {"p_value": 3.14e-12, "log10_p": -11.503},
                                      "R@100": {"p_value": 0.0, "log10_p": -616.4}},
              "rae_vs_knn": {"P@1": {"p_value": 0.5, "log10_p": -0.301}, "R@100": {"p_value": 1.0, "log10_p": 0.0}},
              "rae_query_lambda_vs_rae": {"P@1": {"p_value": 1.0, "log10_p": 0.0}}}
    rows = p_value_rows(report)
    assert rows == {"rae_vs_dual_encoder": {"P@1": "3.1e-12", "R@100": "4.0e-617"},
                    "rae_vs_knn": {"P@1": "5.0e-01", "R@100": "1.0e+00"}}
    write_rows(tmp_path / "tests", rows)
    assert sorted(p.name for p in (tmp_path / "tests").iterdir()) == ["rae_vs_dual_encoder.json", "rae_vs_knn.json"]
    assert json.loads((tmp_path / "tests" / "rae_vs_knn.json").read_text()) == rows["rae_vs_knn"]
