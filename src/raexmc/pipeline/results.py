"""A run's headline: the rows `dvc metrics show` reads, a file each under metrics/<dataset>/ (DVC shows a row per
file: one file would be fifteen columns); p-values as text ("3.1e-12"), since DVC's 5 significant digits would show
an underflowed one as 0.0. Also a run's readable summary, and runs side by side from the files git holds."""

from __future__ import annotations

import json
import math
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from ..errors import PARAMS_FILE, DataError, first_line
from ..evaluation.significance import BASELINES, METHOD, p_value_text, significance_lines
from ..io import write_json
from .tracking.run import HEADLINE_METHODS as METHOD_ROWS  # rae.json, dual_encoder.json, knn.json
from .tracking.run import HEADLINE_METRICS as KEY_METRICS

TEST_ROWS = tuple(f"{METHOD}_vs_{baseline}" for baseline in BASELINES)  # rae_vs_dual_encoder.json, rae_vs_knn.json
WORKSPACE = "workspace"  # the working tree, as `dvc exp show` calls it
WIDTH = 120  # the side-by-side table wraps its columns to fit a terminal this wide
FileReader = Callable[[str], "str | None"]  # a path relative to the project -> its text, or None where it is absent


def method_rows(metrics: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each method's headline metrics; RAE's with λ and τ, kNN's with its τ (RAE's in an older metrics.json)."""
    rows = {method: {name: metrics[method][name] for name in KEY_METRICS} for method in METHOD_ROWS}
    rows[METHOD].update({"lambda": metrics["selection"]["lambda"], "tau": metrics["selection"]["tau"]})
    rows["knn"]["tau"] = metrics["knn"].get("tau", metrics["selection"]["tau"])
    return rows


def p_value_rows(report: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {test: {metric: p_value_text(result) for metric, result in report[test].items()} for test in TEST_ROWS}


def write_rows(folder: str | os.PathLike, rows: dict[str, dict[str, Any]]) -> None:
    Path(folder).mkdir(parents=True, exist_ok=True)
    for name, row in rows.items():
        write_json(Path(folder) / f"{name}.json", row)


def _read(path: Path) -> dict:
    if not path.is_file():
        raise DataError("not found: run `dvc repro` (or the evaluate and significance stages) first", path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"not valid JSON ({exc.msg})", path, exc.lineno) from None


def summary(eval_dir: Path, significance_path: Path, selection_path: Path) -> str:
    """The run's settings, a row per method and the tests, as aligned text (track and `raexmc results` print it)."""
    results = _read(eval_dir / "metrics.json")
    tests = _read(significance_path)
    methods = [m for m in METHOD_ROWS if m in results]
    if not methods:
        raise DataError(f"holds none of the methods {', '.join(METHOD_ROWS)}", eval_dir / "metrics.json")
    chosen = results.get("selection")  # metrics.json's record of the tune stage's choice
    lines = [settings_line(chosen, _read(selection_path), results.get("knn", {}))] if chosen else []
    width = max(len(m) for m in methods)
    lines.append(f"{'method':<{width}}  " + "  ".join(f"{m:>7}" for m in KEY_METRICS) + f"  {'F1@5 tail':>9}")
    for method in methods:
        row = results[method]
        cells = "  ".join(f"{row[m]:>7.2f}" if m in row else f"{'-':>7}" for m in KEY_METRICS)
        tail = row.get("macro-F1@5", {}).get("tail")
        lines.append(f"{method:<{width}}  {cells}  {'-' if tail is None else f'{tail:.2f}':>9}")
    return "\n".join(lines + significance_lines(dict(sorted(tests.items()))))


def settings_line(selection: dict[str, Any], tuned: dict[str, Any], knn: dict[str, Any]) -> str:
    """"λ = 0.1, τ = 0.2 (lambda and tau chosen on validation P@1); retrieval joint; kNN τ = 0.07"."""
    auto = [name for name, on in selection.get("auto", {}).items() if on]
    share = tuned.get("label_share")
    return (f"λ = {selection['lambda']}, τ = {selection['tau']}"
            + (f" ({' and '.join(auto)} chosen on validation {selection['metric']})" if auto else "")
            + f"; retrieval {tuned.get('retrieval', '-')}" + ("" if share is None else f", label_share {share}")
            + f"; kNN τ = {knn.get('tau', selection['tau'])}")


@dataclass(frozen=True)
class RunResults:

    name: str                 # as the user gave it: an experiment, a git revision, or workspace
    commit: str | None        # None for the working tree
    dataset: str
    rows: dict[str, dict[str, Any]]
    tests: dict[str, dict[str, dict[str, Any]]]

    def as_json(self) -> dict[str, Any]:
        rae = self.rows[METHOD]
        return {"name": self.name, "commit": self.commit, "dataset": self.dataset, "lambda": rae.get("lambda"),
                "tau": rae.get("tau"), "knn_tau": self.rows["knn"].get("tau"),
                "metrics": {row: {m: values[m] for m in KEY_METRICS if m in values}
                            for row, values in self.rows.items()},
                "tests": {test: {metric: {"mean_diff": result["mean_diff"], "p_value": result["p_value"],
                                          "log10_p": result["log10_p"] if math.isfinite(result["log10_p"]) else None}
                                 for metric, result in by_metric.items()}
                          for test, by_metric in self.tests.items()}}


def _parsed(read: FileReader, path: str, where: str, parse: Callable[[str], Any]) -> dict[str, Any]:
    text = read(path)
    if text is None:
        raise DataError(f"not in {where}: run the pipeline there first (dvc repro, dvc exp run)", path)
    try:
        value = parse(text)
    except (ValueError, YAMLError) as exc:
        raise DataError(f"not valid in {where} ({first_line(exc)})", path) from None
    if not isinstance(value, dict):
        raise DataError(f"not a mapping in {where}", path)
    return value


def _tests(report: dict[str, Any], path: str, where: str) -> dict[str, dict[str, dict[str, Any]]]:
    """RAE's tests against the baselines, each checked for the numbers the table shows."""
    tests = {test: report[test] for test in TEST_ROWS if test in report}
    for test, by_metric in tests.items():
        for metric, result in by_metric.items() if isinstance(by_metric, dict) else [(None, None)]:
            if not (isinstance(result, dict) and all(isinstance(result.get(key), (int, float))
                                                     for key in ("mean_diff", "p_value", "log10_p"))):
                raise DataError(f"in {where}: needs numbers mean_diff, p_value and log10_p",
                                path, test if metric is None else f"{test}.{metric}")
    return tests


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)


def experiment_commit(root: Path, name: str) -> str:
    refs = _git(root, "for-each-ref", "--format=%(objectname) %(refname)", "refs/exps/").stdout.split("\n")
    found = sorted({line.split()[0] for line in refs if line.endswith(f"/{name}") and line.count("/") == 4})
    if not found:
        raise DataError(f"no DVC experiment named '{name}' (`dvc exp list -A` lists them)", root)
    if len(found) > 1:
        raise DataError(f"'{name}' names experiments of {len(found)} baselines ({', '.join(c[:7] for c in found)}): "
                        "give one with --rev", root)
    return found[0]


def revision_commit(root: Path, rev: str) -> str:
    proc = _git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if proc.returncode != 0:
        raise DataError(f"'{rev}' is no git revision of this project", root)
    return proc.stdout.strip()


def files_of(root: Path, commit: str | None) -> FileReader:
    """A reader of `commit`'s files (of the working tree where it is None)."""
    def read(path: str) -> str | None:
        if commit is None:
            return (root / path).read_text(encoding="utf-8") if (root / path).is_file() else None
        proc = _git(root, "show", f"{commit}:{path}")
        return proc.stdout if proc.returncode == 0 else None
    return read


def run_results(name: str, commit: str | None, read: FileReader, artifacts: str = "artifacts",
                dataset: str | None = None) -> RunResults:
    """The headline of the run whose files `read` gives (the dataset its params.yaml names, unless `dataset`)."""
    where = name if commit is None else f"{name} ({commit[:7]})"
    if dataset is None:
        data = _parsed(read, PARAMS_FILE, where, YAML(typ="safe", pure=True).load).get("data")
        dataset = data.get("name") if isinstance(data, dict) else None
        if not isinstance(dataset, str):
            raise DataError(f"no data.name in {where}", PARAMS_FILE)
    rows = {row: _parsed(read, f"metrics/{dataset}/{row}.json", where, json.loads) for row in METHOD_ROWS}
    significance = f"{artifacts}/{dataset}/significance.json"
    tests = _tests(_parsed(read, significance, where, json.loads), significance, where)
    return RunResults(name, commit, dataset, rows, tests)


def runs_of(root: Path, experiments: list[str], revisions: list[str], artifacts: Path,
            dataset: str | None) -> list[RunResults]:
    wanted = [(e, experiment_commit(root, e)) for e in experiments]
    wanted += [(r, None if r == WORKSPACE else revision_commit(root, r)) for r in revisions]
    return [run_results(label, commit, files_of(root, commit), artifacts.as_posix(), dataset)
            for label, commit in wanted]


def _number(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _table_rows(runs: list[RunResults]) -> list[tuple[str, list[str]]]:
    lines = [("dataset", [run.dataset for run in runs]),
             ("λ (RAE)", [_number(run.rows[METHOD].get("lambda"), "g") for run in runs]),
             ("τ (RAE)", [_number(run.rows[METHOD].get("tau"), "g") for run in runs]),
             ("τ (kNN)", [_number(run.rows["knn"].get("tau"), "g") for run in runs])]
    for row in METHOD_ROWS:
        lines += [(f"{row} {m}", [_number(run.rows[row].get(m), ".2f") for run in runs]) for m in KEY_METRICS]
    for test in TEST_ROWS:
        label = test.replace("_vs_", " vs ")
        for metric in dict.fromkeys(m for run in runs for m in run.tests.get(test, {})):  # once each, first seen first
            results = [run.tests.get(test, {}).get(metric) for run in runs]
            lines.append((f"{label} {metric} Δ", [_number(r and r["mean_diff"], "+.2f") for r in results]))
            lines.append((f"{label} {metric} p", ["-" if r is None else p_value_text(r) for r in results]))
    return lines


def side_by_side(runs: list[RunResults], width: int = WIDTH) -> str:
    """The runs as columns of aligned text, in blocks that fit `width`, headed by their names (14 characters)."""
    lines = _table_rows(runs)
    label_width = max(len(label) for label, _ in lines)
    names = [run.name if len(run.name) <= 14 else run.name[:13] + "…" for run in runs]
    cell = max(9, *(len(name) for name in names))
    per_block = max(1, (width - label_width) // (cell + 2))
    blocks = []
    for start in range(0, len(runs), per_block):
        part = slice(start, start + per_block)
        text = [f"{'':<{label_width}}" + "".join(f"  {name:>{cell}}" for name in names[part])]
        text += [f"{label:<{label_width}}" + "".join(f"  {value:>{cell}}" for value in cells[part])
                 for label, cells in lines]
        blocks.append("\n".join(line.rstrip() for line in text))
    return "\n\n".join(blocks)
