"""The tune stage's choice as one typed record, `Selection`: what it writes to selection.json and what every reader
(evaluate, package, the stage's report) takes from it, each number in one form. A damaged or
outdated file is one DataError naming it and the key."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..errors import DataError
from ..io import read_json, write_json
from ..memory.merge import JOINT, RaeRetrieval
from ..settings import AtLeast0, AtLeast1, HeadlineMetric, NonNegative, Positive, Retrieval, Share, record_error

SELECTION_FILE = "selection.json"
RERUN = "rerun the tune stage"
OPTIONAL = ("keep", "keep_curve", "prototypes", "prototypes_curve", "baselines")  # left out of the file where unset


class Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, strict=True)


class KnnChoice(Record):
    """kNN's τ (selection.select_knn): chosen on its own validation curve where τ is auto, else RAE's fixed τ."""

    tau: Positive
    auto: dict[str, bool]
    val_value: float | None = None
    fixed_tau: Positive | None = None
    fixed_val_value: float | None = None
    validation: list[dict[str, float]] | None = None


class Baselines(Record):
    knn: KnnChoice


class Selection(Record):
    """RAE's λ, τ, b and retrieval chosen on held-out training inputs, the memory's keep and α where chosen, kNN's τ,
    and the validation: the metric there and at the fixed values, the held-out split and the whole curve."""

    lam: Share = Field(alias="lambda")
    tau: Positive
    b: AtLeast1
    retrieval: Retrieval = JOINT
    label_share: Share | None = None
    metric: HeadlineMetric
    auto: dict[str, bool]
    val_value: float
    fixed_lambda: Share
    fixed_tau: Positive
    fixed_label_share: Share | None = None
    fixed_val_value: float
    val_queries: AtLeast0
    val_folds: AtLeast1
    memory_inputs: AtLeast0
    memory_input_keys: AtLeast0
    val_fraction: Share
    val_max_queries: AtLeast1
    val_seed: int
    val_split_from: str
    validation: list[dict[str, Any]]
    keep: Share | None = None                        # where memory.keep is auto
    keep_curve: list[dict[str, Any]] | None = None
    prototypes: NonNegative | None = None            # where memory.prototypes is auto
    prototypes_curve: list[dict[str, Any]] | None = None
    baselines: Baselines | None = None               # the stage adds it once RAE's point is chosen

    @model_validator(mode="after")
    def _share_matches_retrieval(self) -> Selection:
        if (self.label_share is None) != (self.retrieval == JOINT):
            raise ValueError("label_share must be a number in [0, 1] for a split retrieval, null for a joint one")
        return self

    @property
    def rae_retrieval(self) -> RaeRetrieval:
        return RaeRetrieval(self.retrieval, self.label_share)

    @property
    def knn_tau(self) -> float:
        """The τ kNN is scored at: its own where the tune stage chose one, else RAE's (a fixed τ is every method's)."""
        return self.tau if self.baselines is None else self.baselines.knn.tau

    def with_(self, **changes: Any) -> Selection:
        return type(self).model_validate({**self.model_dump(), **changes})

    def record(self) -> dict[str, Any]:
        """selection.json's content: the fields under their file names, the OPTIONAL ones only where set."""
        record = self.model_dump(by_alias=True)
        if self.baselines is not None:
            record["baselines"]["knn"] = self.baselines.knn.model_dump(exclude_none=True)
        return {key: value for key, value in record.items() if value is not None or key not in OPTIONAL}

    def lambda_rows(self, test_sweep: list[dict[str, float]]) -> list[dict[str, float]]:
        """The chosen metric against λ at the chosen τ and share: rows {"lambda", "validation", "test"}."""
        validation = {row["lambda"]: row[self.metric] for row in self.validation
                      if row["tau"] == self.tau and row.get("label_share") == self.label_share}
        return [{"lambda": row["lambda"], "validation": validation[row["lambda"]], "test": row[self.metric]}
                for row in test_sweep if row["lambda"] in validation]


def write_selection(folder: str | os.PathLike, selection: Selection) -> None:
    write_json(Path(folder) / SELECTION_FILE, selection.record())


def read_selection(folder: str | os.PathLike) -> Selection:
    """The tune stage's choice in `folder`, checked: evaluation and the packaged model run RAE at it."""
    path = Path(folder) / SELECTION_FILE
    if not path.is_file():
        raise DataError("no selection file: run the tune stage", path)
    raw = read_json(path)
    if not isinstance(raw, dict):
        raise DataError(f"not a JSON object: {RERUN}", path)
    try:
        return Selection.model_validate(raw)
    except ValidationError as exc:
        raise record_error(exc, path, RERUN) from None
