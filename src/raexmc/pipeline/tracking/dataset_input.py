"""The dataset a pipeline run used, as an MLflow dataset input (the run page's Datasets, `mlflow.search_runs`):
described by its folder, never loaded. A MetaDataset holds a name, a source and a digest only."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

# The folder's own record of what it holds (counts, where it came from): their bytes are its digest, so two
# folders built from the same data share one, without reading the data itself
RECORD_FILES = ("stats.json", "source.json")


def dataset_input(uri: str, name: str, digest: str, context: str):
    """An mlflow DatasetInput for the dataset folder at `uri` named `name` (its folder_digest `digest`), used by
    the run as `context`."""
    from mlflow.data import get_dataset_source_from_json
    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.entities import DatasetInput, InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    source = get_dataset_source_from_json(json.dumps({"uri": uri}), "local")
    dataset = MetaDataset(source, name=name, digest=digest)
    return DatasetInput(dataset._to_mlflow_entity(), tags=[InputTag(MLFLOW_DATASET_CONTEXT, context)])


def folder_digest(folder: Path) -> str:
    """The first 16 hex digits of the SHA-256 of the folder's record files (those it has), in RECORD_FILES order."""
    digest = hashlib.sha256()
    for name in RECORD_FILES:
        if (folder / name).is_file():
            digest.update(name.encode() + b"\0" + (folder / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]
