"""Paired significance tests: a t-test on per-input metric values (paired by test input), and RAE against its
baselines with it."""

from __future__ import annotations

import math
import os
import sys
from typing import Any

import numpy as np

from ..errors import PARAMS_FILE, ConfigError, DataError
from ..io import load_arrays

METHOD = "rae"
BASELINES = ("dual_encoder", "knn")
PER_INSTANCE_ARTIFACT = "evaluate/per_instance.npz"  # as the evaluate stage logs it into its MLflow run


def _paired(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both inputs as float arrays, checked to be paired: 1-D, same length, at least two pairs."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.ndim != 1 or b.ndim != 1:
        raise DataError(f"paired scores must be 1-D, got shapes {a.shape} and {b.shape}")
    if a.size != b.size:
        raise DataError(f"paired scores differ in length: {a.size} and {b.size}")
    if a.size < 2:
        raise DataError(f"a paired t-test needs at least two pairs, got {a.size}")
    return a, b


def _log10_two_sided_p(t: float, dof: int) -> float:
    """log10 of P(|T| > |t|) for Student's t with `dof` degrees of freedom, also where p underflows: there the tail
    is the regularised incomplete beta I_x(dof/2, 1/2), x = dof / (dof + t^2), whose continued fraction (DLMF
    8.17.22) converges in a few terms far below its mean."""
    import scipy.special  # here, not at the top: the track stage reads this module's reports without testing
    import scipy.stats

    log_p = math.log(2.0) + float(scipy.stats.t.logsf(abs(t), dof))
    if math.isfinite(log_p):
        return log_p / math.log(10.0)
    a, b, x = dof / 2.0, 0.5, dof / (dof + t * t)
    log_prefactor = (a * math.log(x) + b * math.log(t * t / (dof + t * t)) - math.log(a)
                     - float(scipy.special.betaln(a, b)))
    return (log_prefactor + math.log(_beta_continued_fraction(a, b, x))) / math.log(10.0)


def _beta_continued_fraction(a: float, b: float, x: float, tiny: float = 1e-300, tol: float = 1e-15) -> float:
    """The continued fraction of I_x(a, b) (modified Lentz), valid for x < (a + 1) / (a + b + 2)."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 10_000):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1.0) < tol:
            break
    return fraction


def paired_ttest(a: np.ndarray, b: np.ndarray, confidence: float = 0.95) -> dict[str, float | int]:
    """Two-sided paired t-test of a against b, with a confidence interval for mean(a - b), as plain numbers for JSON.
    Constant differences, where scipy gives nan, give t = 0 and p = 1 (all zero) or t = ±inf and p = 0; log10_p keeps
    the size of a p that underflows to 0.0 on large test sets."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    a, b = _paired(a, b)
    diff = a - b
    n = diff.size
    mean_diff = float(diff.mean())
    if np.all(diff == diff[0]):
        t, p_value, log10_p = ((0.0, 1.0, 0.0) if mean_diff == 0.0
                               else (math.copysign(math.inf, mean_diff), 0.0, -math.inf))
        half_width = 0.0
    else:
        import scipy.stats  # see _log10_two_sided_p

        result = scipy.stats.ttest_rel(a, b)
        t, p_value = float(result.statistic), float(result.pvalue)
        log10_p = _log10_two_sided_p(t, n - 1)
        std_err = float(diff.std(ddof=1)) / math.sqrt(n)
        half_width = float(scipy.stats.t.ppf(0.5 + confidence / 2.0, n - 1)) * std_err
    return {"mean_a": float(a.mean()), "mean_b": float(b.mean()), "mean_diff": mean_diff,
            "ci_low": mean_diff - half_width, "ci_high": mean_diff + half_width, "t": t, "p_value": p_value,
            "log10_p": log10_p, "n": n}


LOGGED_FIELDS = ("mean_diff", "ci_low", "ci_high", "log10_p")


def logged_summary(report: dict[str, Any]) -> dict[str, Any]:
    """What the MLflow run keeps of a significance report (LOGGED_FIELDS; p itself underflows on large test sets);
    the rest stays in significance.json: logged, it was a third of a run's metrics."""
    return {pair: {metric: {field: test[field] for field in LOGGED_FIELDS} for metric, test in tests.items()}
            for pair, tests in report.items()}


def p_value_text(test: dict[str, Any]) -> str:
    """A test's p-value in two significant digits: "3.1e-12", or from log10_p where p underflowed ("4.0e-617");
    only a constant nonzero difference (log10_p -inf) reads "0"."""
    if test["p_value"] >= sys.float_info.min:
        return f"{test['p_value']:.1e}"
    if test["log10_p"] == -math.inf:
        return "0"
    exponent = math.floor(test["log10_p"])
    mantissa = round(10 ** (test["log10_p"] - exponent), 1)
    if mantissa >= 10.0:  # 9.96 rounds up to the next power of ten
        mantissa, exponent = 1.0, exponent + 1
    return f"{mantissa:.1f}e{exponent:+03d}"


def difference_text(test: dict[str, Any]) -> str:
    """A test as every report writes it: the mean difference (percentage points) and its p, "+1.23 (p 4.5e-06)"."""
    return f"{test['mean_diff']:+.2f} (p {p_value_text(test)})"


def significance_lines(report: dict[str, Any]) -> list[str]:
    """Each pair's tests on one line, "rae vs knn: P@1 +1.23 (p 4.5e-06), ..." (`raexmc results`, `raexmc evaluate`)."""
    return [f"{pair.replace('_vs_', ' vs ')}: " + ", ".join(f"{m} {difference_text(t)}" for m, t in tests.items()
                                                            if isinstance(t, dict))
            for pair, tests in report.items() if isinstance(tests, dict) and tests]


def load_per_instance(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Per-instance arrays ("method/metric" -> values) from a per_instance.npz."""
    arrays = load_arrays(path)
    for key, values in arrays.items():
        if values.ndim != 1 or not np.isfinite(values).all():
            raise DataError(f"per-instance '{key}' is not a row of finite values: rerun the evaluate stage that "
                            f"wrote it", path, key)
    return arrays


def _test(a: dict[str, np.ndarray], a_method: str, b: dict[str, np.ndarray], b_method: str,
          metrics: list[str], a_origin: str | os.PathLike, b_origin: str | os.PathLike) -> dict[str, Any]:
    """Each metric's paired t-test of `a_method` in run a against `b_method` in run b (read from the origins)."""
    out = {}
    for metric in metrics:
        for values, method, origin in ((a, a_method, a_origin), (b, b_method, b_origin)):
            if f"{method}/{metric}" not in values:
                raise DataError(f"no per-instance '{method}/{metric}'", origin)
        ours, theirs = a[f"{a_method}/{metric}"], b[f"{b_method}/{metric}"]
        if len(ours) != len(theirs):
            raise DataError(f"{len(theirs)} test queries, but this run has {len(ours)}: compare runs on the same "
                            f"test set", b_origin)
        out[metric] = paired_ttest(100 * ours, 100 * theirs)  # percentage points, as the metrics are reported
    return out


def compare_runs(run: dict[str, np.ndarray], metrics: list[str], other: dict[str, np.ndarray] | None = None,
                 run_origin: str | os.PathLike = "per_instance.npz",
                 other_origin: str | os.PathLike = "significance.compare_with") -> dict[str, Any]:
    """{"rae_vs_dual_encoder": {metric: test}, "rae_vs_knn": ...}; with `other`, each method against the other
    run's. A metric the run lacks is a ConfigError about significance.metrics."""
    measured = sorted({key.split("/", 1)[1] for key in run if key.startswith(f"{METHOD}/")})
    unknown = [metric for metric in metrics if metric not in measured]
    if unknown:
        raise ConfigError(f"no per-instance values of {', '.join(map(repr, unknown))} in "
                          f"{run_origin} (it has {', '.join(measured)})", PARAMS_FILE, "significance.metrics")
    report = {f"{METHOD}_vs_{baseline}": _test(run, METHOD, run, baseline, metrics, run_origin, run_origin)
              for baseline in BASELINES}
    if other is not None:
        for method in (METHOD, *BASELINES):
            report[f"{method}_vs_other"] = _test(run, method, other, method, metrics, run_origin, other_origin)
    return report
