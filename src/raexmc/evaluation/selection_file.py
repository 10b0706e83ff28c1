"""The tune stage's selection.json, read back: the λ, τ and retrieval it chose for RAE (and τ for kNN), checked,
for the stages that score at them (evaluate, package) and the λ curve evaluate plots beside the test's."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import DataError
from ..io import read_json
from ..memory.merge import JOINT, RaeRetrieval, recorded_retrieval
from ..settings import Positive, Share, record_value

SELECTION_FILE = "selection.json"


def read_selection(folder: str | os.PathLike) -> dict[str, Any]:
    """The tune stage's choice, checked: evaluation and the packaged memory run RAE at its λ and τ."""
    path = Path(folder) / SELECTION_FILE
    if not path.is_file():
        raise DataError("no selection file: run the tune stage", path)
    selection = read_json(path)
    if not isinstance(selection, dict):
        raise DataError("not a JSON object", path)
    for key, kind in (("lambda", Share), ("tau", Positive)):
        record_value(kind, selection.get(key), path, key)
    recorded_retrieval(selection.get("retrieval", JOINT), selection.get("label_share"), path)
    try:
        tau = knn_tau(selection)
    except AttributeError:
        raise DataError(f"not a mapping of baselines: {selection.get('baselines')!r}", path, "baselines") from None
    record_value(Positive, tau, path, "baselines.knn.tau")
    return selection


def rae_retrieval(selection: dict[str, Any]) -> RaeRetrieval:
    """The retrieval the tune stage chose (joint in selection files written before the choice existed)."""
    return RaeRetrieval(selection.get("retrieval", JOINT), selection.get("label_share"))


def knn_tau(selection: dict[str, Any]) -> float:
    """The τ the evaluate stage scores kNN at: the one the tune stage chose for kNN alone where it chose RAE's
    (baseline_selection.py), else RAE's (a fixed τ is the user's, for every method; so is the τ of a selection file
    written before kNN's τ was chosen)."""
    return selection.get("baselines", {}).get("knn", {}).get("tau", selection["tau"])


def lambda_rows(selection: dict[str, Any], test_sweep: list[dict[str, float]]) -> list[dict[str, float]]:
    """The chosen metric against λ at the chosen τ, on validation beside test: rows {"lambda", "validation", "test"}."""
    metric, share = selection["metric"], selection.get("label_share")
    validation = {r["lambda"]: r[metric] for r in selection["validation"]
                  if r["tau"] == selection["tau"] and r.get("label_share") == share}
    return [{"lambda": r["lambda"], "validation": validation[r["lambda"]], "test": r[metric]}
            for r in test_sweep if r["lambda"] in validation]
