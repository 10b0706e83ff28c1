"""Paired t-test: a hand-worked example checked against scipy, and the degenerate cases."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import scipy.stats

from raexmc.errors import ConfigError, DataError
from raexmc.evaluation.significance import compare_runs, p_value_text, paired_ttest

A = np.array([1.0, 2.0, 3.0, 5.0])
B = np.array([0.0, 1.0, 2.0, 3.0])


def test_known_example_by_hand():
    # d = a - b = [1, 1, 1, 2]: mean 1.25, sd = sqrt((3 * 0.25^2 + 0.75^2) / 3) = 0.5,
    # se = 0.5 / sqrt(4) = 0.25, t = 1.25 / 0.25 = 5 on 3 degrees of freedom.
    # t_{0.975, 3} = 3.18245 -> half width 3.18245 * 0.25 = 0.79561 -> CI [0.45439, 2.04561].
    # Two-sided p for t = 5, df = 3: 0.01539 (t tables).
    r = paired_ttest(A, B)
    assert r["n"] == 4
    assert [r[k] for k in ("mean_a", "mean_b", "mean_diff", "t")] == pytest.approx([2.75, 1.5, 1.25, 5.0], abs=1e-9)
    assert [r[k] for k in ("ci_low", "ci_high", "p_value")] == pytest.approx([0.45439, 2.04561, 0.01539], abs=1e-5)
    assert r["log10_p"] == pytest.approx(math.log10(0.01539), abs=1e-3)
    # the result is plain JSON, and a higher confidence gives a wider interval
    assert all(type(v) is float for k, v in r.items() if k != "n") and type(r["n"]) is int
    assert json.loads(json.dumps(r)) == r
    narrow, wide = paired_ttest(A, B, 0.9), paired_ttest(A, B, 0.99)
    assert wide["ci_low"] < narrow["ci_low"] < narrow["ci_high"] < wide["ci_high"]


def test_matches_scipy_on_random_data():
    rng = np.random.default_rng(0)
    a = rng.random(200)
    b = a - 0.02 + 0.1 * rng.standard_normal(200)
    r = paired_ttest(a, b, confidence=0.9)
    ref = scipy.stats.ttest_rel(a, b)
    ci = ref.confidence_interval(0.9)
    assert r["t"] == pytest.approx(ref.statistic, abs=1e-9)
    assert r["p_value"] == pytest.approx(ref.pvalue, abs=1e-12)
    assert (r["ci_low"], r["ci_high"]) == pytest.approx((ci.low, ci.high), abs=1e-9)


def test_p_that_underflows_keeps_its_size_in_log10_p_and_prints_from_it_never_as_zero():
    # 1,000 paired differences with mean 1 and sample sd 0.25 exactly: t = 1 / (0.25 / sqrt(1000)) = 126.5
    # on 999 degrees of freedom, far below the smallest double as a p-value. The reference is the t
    # distribution's tail as a regularised incomplete beta function, evaluated in 50-digit arithmetic:
    # P(|T| > t) = I_{v / (v + t^2)}(v / 2, 1 / 2).
    import mpmath

    z = np.random.default_rng(0).standard_normal(1000)
    diff = 1.0 + 0.25 * (z - z.mean()) / z.std(ddof=1)
    r = paired_ttest(diff, np.zeros_like(diff))
    assert r["p_value"] == 0.0  # what float64 gives
    mpmath.mp.dps = 50
    t, v = mpmath.mpf(r["t"]), mpmath.mpf(999)
    p = mpmath.betainc(v / 2, mpmath.mpf(1) / 2, 0, v / (v + t ** 2), regularized=True)
    expected = mpmath.log10(p)
    assert expected < -300
    assert r["log10_p"] == pytest.approx(float(expected), abs=1e-6 * abs(float(expected)))
    assert p_value_text(r) == mpmath.nstr(p, 2, min_fixed=0, max_fixed=0)
    assert float(p_value_text(r).split("e")[1]) < -300


@pytest.mark.parametrize(("p_value", "log10_p", "text"), [
    (0.01539, math.log10(0.01539), "1.5e-02"), (1.0, 0.0, "1.0e+00"), (3.14e-12, math.log10(3.14e-12), "3.1e-12"),
    (0.0, -616.4, "4.0e-617"),      # 10^-616.4 = 10^0.6 * 10^-617 = 3.98 * 10^-617
    (0.0, -400.001, "1.0e-400"),    # 10^0.999 = 9.98 rounds to 10: the next power of ten
    (0.0, -math.inf, "0")])         # a constant nonzero difference: p is 0 exactly
def test_p_value_text_has_two_significant_digits(p_value, log10_p, text):
    assert p_value_text({"p_value": p_value, "log10_p": log10_p}) == text


@pytest.mark.parametrize(("shift", "t", "p", "log10_p"), [(0.0, 0.0, 1.0, 0.0), (1.0, math.inf, 0.0, -math.inf),
                                                        (-1.0, -math.inf, 0.0, -math.inf)])
def test_constant_differences_give_exact_values_not_nan(shift, t, p, log10_p):
    """No difference: t 0, p 1; a = b + 1 beats b everywhere (t = +inf), a = b - 1 loses everywhere (-inf, not +inf);
    each a zero-width interval at the difference."""
    r = paired_ttest(A + shift, A)  # every difference is exactly `shift`
    assert (r["t"], r["p_value"], r["log10_p"], r["mean_diff"]) == (t, p, log10_p, shift)
    assert (r["ci_low"], r["ci_high"]) == (shift, shift)


@pytest.mark.parametrize("a, b", [(A, B[:3]), (np.array([]), np.array([])), (A[:1], B[:1])])
def test_unpaired_or_too_short_input_is_rejected(a, b):
    with pytest.raises(DataError):
        paired_ttest(a, b)


def per_instance(n: int, metrics=("P@1", "P@5")) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(n)
    return {f"{method}/{metric}": rng.random(n) for method in ("rae", "dual_encoder", "knn") for metric in metrics}


def test_an_unmeasured_metric_is_an_error_about_significance_metrics_and_another_test_set_names_its_file():
    with pytest.raises(ConfigError) as caught:
        compare_runs(per_instance(5), ["P@1", "P@7"], run_origin="eval/per_instance.npz")
    assert caught.value.one_line() == ("ConfigError: params.yaml:significance.metrics: no per-instance values of "
                                       "'P@7' in eval/per_instance.npz (it has P@1, P@5)")
    with pytest.raises(DataError) as caught:
        compare_runs(per_instance(5), ["P@1"], per_instance(6), other_origin="runs/b/per_instance.npz")
    assert caught.value.one_line() == ("DataError: runs/b/per_instance.npz: 6 test queries, but this run has 5: "
                                       "compare runs on the same test set")
