"""Any system's score file scored on a dataset's test set as the evaluate stage scores its own, and paired t-tests
against another; an LF or NGAME folder is read into a temporary dataset folder as the download stage writes one."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..data.dataset import Dataset, write_dataset
from ..data.layouts import FILTER_FILES, read_layout
from ..errors import DataError
from ..memory.keys_values import training_values
from .evaluator import F1_K, RANK_DEPTH, Evaluator
from .propensity import Propensity, table_propensity
from .score_file import read_scores
from .significance import difference_text, paired_ttest


@dataclass
class EvalData:
    Y_train: sp.csr_matrix
    Y_test: sp.csr_matrix
    exclude: sp.csr_matrix
    names: tuple[str, ...]


@contextmanager
def opened_dataset(folder: str | os.PathLike) -> Iterator[Dataset]:
    """A dataset folder, or an LF or NGAME folder read into a temporary one named as it is (for the propensity
    table)."""
    folder = Path(folder)
    if (folder / "stats.json").is_file():
        yield Dataset(folder)
        return
    if not folder.is_dir():
        raise DataError("dataset folder not found: give data/<name> or a folder in the LF or NGAME layout", folder)
    reader = read_layout(folder)
    origins = {split: str(folder / name) for split, name in FILTER_FILES.items()}
    with tempfile.TemporaryDirectory(prefix="raexmc-evaluate-") as tmp:
        target = Path(tmp) / folder.resolve().name
        write_dataset(target, reader.labels, reader.train, reader.test, reader.filters,
                      {"source": "local", "path": str(folder.resolve()), "layout": reader.layout}, origins)
        yield Dataset(target)


def score_metrics(test: EvalData, scores: sp.csr_matrix, propensity: Propensity) -> tuple[dict[str, Any],
                                                                                          dict[str, np.ndarray]]:
    """The metrics table (percent) and per-query values of `scores` ranked as the evaluate stage ranks them."""
    evaluator = Evaluator(training_values(test.Y_train), test.Y_test, test.exclude, propensity.ab)
    ranked = evaluator.rank(evaluator.num_queries, lambda rows: scores[rows])
    return evaluator.summary(ranked)


def score_files(dataset: str | os.PathLike, scores: str | os.PathLike, compare: str | os.PathLike | None,
                tested: Sequence[str], propensity: Propensity | None = None) -> dict[str, Any]:
    """{"scores": metrics, "compare": metrics, "scores_vs_compare": {metric: paired t-test in percentage points}
    (with `compare`), "propensity": the pair used (default the table's), "files": the paths}."""
    with opened_dataset(dataset) as data:
        test = EvalData(data.label_matrix("train"), data.label_matrix("test"), data.filter_matrix("test"), data.names)
    propensity = propensity or table_propensity(test.names)
    shape = test.Y_test.shape
    files = {"scores": scores, **({} if compare is None else {"compare": compare})}
    report: dict[str, Any] = {"files": {name: str(path) for name, path in files.items()},
                              "propensity": propensity.record()}
    values = {}
    for name, path in files.items():
        report[name], values[name] = score_metrics(test, read_scores(path, *shape, RANK_DEPTH), propensity)
    if compare is not None:
        report["scores_vs_compare"] = {metric: paired_ttest(100 * values["scores"][metric],
                                                            100 * values["compare"][metric]) for metric in tested}
    return report


def report_table(report: dict[str, Any], columns: Sequence[str] = ("scores", "compare"),
                 tests: dict[str, Any] | None = None) -> str:
    """The report as aligned text: a row per metric (macro-F1@5 per segment last), a column per file (or method) of
    `columns`, and with `tests` (default: the comparison's) each tested metric's difference and p."""
    columns = [name for name in columns if name in report]
    tests = report.get("scores_vs_compare", {}) if tests is None else tests
    first = report[columns[0]]
    metrics = [name for name in first if name != f"macro-F1@{F1_K}" and not isinstance(first[name], dict)]
    rows = [(name, [report[c].get(name) for c in columns], tests.get(name)) for name in metrics]
    rows += [(f"macro-F1@{F1_K} {segment}", [report[c][f"macro-F1@{F1_K}"][segment] for c in columns], None)
             for segment in first[f"macro-F1@{F1_K}"]]
    width = max(len(name) for name, _, _ in rows)
    cell = max(8, *map(len, columns))
    propensity = report["propensity"]
    lines = [f"PSP@k: A={propensity['A']:g}, B={propensity['B']:g} ({propensity['source']})",
             f"{'metric':<{width}}  " + "  ".join(f"{c:>{cell}}" for c in columns)
             + ("  difference (p)" if tests else "")]
    for name, cells, test in rows:
        line = f"{name:<{width}}  " + "  ".join(f"{'-' if v is None else f'{v:.2f}':>{cell}}" for v in cells)
        lines.append(line + ("" if test is None else f"  {difference_text(test)}"))
    return "\n".join(lines)

