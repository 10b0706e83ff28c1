"""A readable summary of one pipeline's results: the key metrics per method, and RAE against each
baseline with its paired t-test (mean difference and p-value; `dvc metrics show` has the p-values alone)."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import DataError
from ..evaluation.significance import p_value_text

KEY_METRICS = ("P@1", "P@5", "nDCG@5", "PSP@5", "R@100")
METHODS = ("rae", "rae_query_lambda", "dual_encoder", "knn")


def _read(path: Path) -> dict:
    if not path.is_file():
        raise DataError("not found: run `dvc repro` (or the evaluate and significance stages) first", path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"not valid JSON ({exc.msg})", path, exc.lineno) from None


def summary(eval_dir: Path, significance_path: Path, metrics: tuple[str, ...] = KEY_METRICS) -> str:
    """The summary as aligned plain text: one row per method that the run has, then the tests."""
    results = _read(eval_dir / "metrics.json")
    tests = _read(significance_path)
    methods = [m for m in METHODS if m in results]
    if not methods:
        raise DataError(f"holds none of the methods {', '.join(METHODS)}", eval_dir / "metrics.json")
    lines = []
    selection = results.get("selection")
    if selection:
        auto = [name for name, on in selection.get("auto", {}).items() if on]
        knn_tau = results.get("knn", {}).get("tau", selection["tau"])  # kNN's own where τ was chosen
        lines.append(f"λ = {selection['lambda']}, τ = {selection['tau']}"
                     + (f" ({' and '.join(auto)} chosen on validation {selection['metric']})" if auto else "")
                     + (f"; kNN τ = {knn_tau}" if knn_tau != selection["tau"] else ""))
    width = max(len(m) for m in methods)
    lines.append(f"{'method':<{width}}  " + "  ".join(f"{m:>7}" for m in metrics) + f"  {'F1@5 tail':>9}")
    for method in methods:
        row = results[method]
        cells = "  ".join(f"{row[m]:>7.2f}" if m in row else f"{'-':>7}" for m in metrics)
        tail = row.get("macro-F1@5", {}).get("tail")
        lines.append(f"{method:<{width}}  {cells}  {'-' if tail is None else f'{tail:.2f}':>9}")
    for name, by_metric in sorted(tests.items()):
        if not isinstance(by_metric, dict) or not by_metric:
            continue
        parts = [f"{m} {t['mean_diff']:+.2f} (p {p_value_text(t)})"
                 for m, t in by_metric.items() if isinstance(t, dict)]
        lines.append(f"{name.replace('_vs_', ' vs ')}: " + ", ".join(parts))
    return "\n".join(lines)
