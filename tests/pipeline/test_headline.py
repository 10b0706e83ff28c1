"""The headline files DVC shows: the key metrics of RAE and its baselines with λ and τ, and RAE's p-values."""

from __future__ import annotations

from raexmc.pipeline.headline import headline_metrics, headline_p_values

KEYS = ("P@1", "P@5", "nDCG@5", "PSP@5", "R@100")


def summary(base: float) -> dict:
    """A method's metrics.json entry: the headline five plus what the full table also holds."""
    return {**{key: base + i for i, key in enumerate(KEYS)}, "P@3": 1.0, "macro-F1@5": {"tail": 2.0}}


def test_the_headline_keeps_the_five_metrics_of_rae_and_its_baselines_with_lambda_and_tau():
    metrics = {"rae": summary(50), "dual_encoder": summary(30), "knn": summary(40), "rae_query_lambda": summary(51),
               "selection": {"lambda": 0.3, "tau": 0.04, "metric": "P@1"}, "retrieval": {"depth": 200}}
    assert headline_metrics(metrics) == {
        "lambda": 0.3, "tau": 0.04,
        "rae": {"P@1": 50, "P@5": 51, "nDCG@5": 52, "PSP@5": 53, "R@100": 54},
        "dual_encoder": {"P@1": 30, "P@5": 31, "nDCG@5": 32, "PSP@5": 33, "R@100": 34},
        "knn": {"P@1": 40, "P@5": 41, "nDCG@5": 42, "PSP@5": 43, "R@100": 44}}


def test_the_headline_p_values_are_rae_against_each_baseline_as_text():
    report = {"rae_vs_dual_encoder": {"P@1": {"p_value": 3.14e-12, "log10_p": -11.503}},
              "rae_vs_knn": {"P@1": {"p_value": 0.0, "log10_p": -616.4}},
              "rae_query_lambda_vs_rae": {"P@1": {"p_value": 0.5, "log10_p": -0.301}}}
    assert headline_p_values(report, "P@1") == {"p_P@1": {"vs_dual_encoder": "3.1e-12", "vs_knn": "4.0e-617"}}
