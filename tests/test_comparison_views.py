"""What DVC's own views show of a reproduced project (real dvc, a temporary git repo): `dvc metrics show` of
the headline rows within 120 columns, p-values as text that reads as the number it is (never 0.0), and
`dvc plots show` with the templates dvc.yaml names (the measured points of a sweep joined by straight lines,
bars per method for the label segments)."""

from __future__ import annotations

import json
import math

import pytest

from conftest import dvc

pytestmark = pytest.mark.slow


def widest_line(text: str) -> int:
    return max(len(line.rstrip()) for line in text.splitlines())


def test_metrics_show_is_a_row_per_method_and_test_within_120_columns(reproduced_project):
    project = reproduced_project
    shown = dvc("metrics", "show", cwd=project).stdout
    assert widest_line(shown) <= 120, shown
    rows = {line.split()[0]: line.split()[1:] for line in shown.splitlines()[1:]}
    assert set(rows) == {f"metrics/tiny/{row}.json"
                         for row in ("rae", "dual_encoder", "knn", "rae_vs_dual_encoder", "rae_vs_knn")}
    assert shown.splitlines()[0].split() == ["Path", "P@1", "P@5", "PSP@5", "R@100", "lambda", "nDCG@5", "tau"]

    data = json.loads(dvc("metrics", "show", "--json", cwd=project).stdout)[""]["data"]
    report = json.loads((project / "artifacts/tiny/significance.json").read_text())
    full = json.loads((project / "artifacts/tiny/eval/metrics.json").read_text())
    assert data["metrics/tiny/knn.json"]["data"]["R@100"] == full["knn"]["R@100"]
    assert data["metrics/tiny/rae.json"]["data"]["lambda"] == full["selection"]["lambda"]
    for comparison in ("rae_vs_dual_encoder", "rae_vs_knn"):
        for metric, test in report[comparison].items():
            text = data[f"metrics/tiny/{comparison}.json"]["data"][metric]
            mantissa, exponent = text.split("e")
            assert math.log10(float(mantissa)) + int(exponent) == pytest.approx(test["log10_p"], abs=0.03), text


def test_plots_show_renders_lines_and_bars_per_method(reproduced_project, tmp_path):
    plots = json.loads(dvc("plots", "show", "--json", cwd=reproduced_project).stdout)
    specs = {path: renderers[0]["content"] for path, renderers in plots["data"].items() if renderers}
    for sweep in ("lambda_sweep", "b_sweep", "lambda_selection"):
        spec = specs[f"artifacts/tiny/eval/{sweep}.json"]
        assert spec["mark"] == {"type": "line", "point": True, "tooltip": {"content": "data"}}, sweep
        assert "loess" not in json.dumps(spec), "no curve fitted to a sweep"
        assert spec["encoding"]["color"]["field"] == "field", "a colour per metric"
    bars = specs["artifacts/tiny/eval/segments_f1.json"]
    assert bars["mark"]["type"] == "bar" and bars["encoding"]["x"]["type"] == "nominal"
    assert bars["encoding"]["color"]["field"] == bars["encoding"]["xOffset"]["field"] == "method"
    assert {row["method"] for row in bars["data"]["values"]} == {"rae", "dual_encoder", "knn", "rae_query_lambda"}
    dvc("plots", "show", "--out", str(tmp_path / "html"), cwd=reproduced_project)
    assert "segments_f1" in (tmp_path / "html" / "index.html").read_text()
