"""The packaged RAE model as an MLflow pyfunc model (its folder and this package's code), registered under a name
and alias. Request: {"dataframe_records": [{"text": "..."}], "params": {"k": 5}} (or "inputs"); answer:
{"predictions": [{"text": "...", "labels": [{"label", "id", "text", "score"}, ...]}]}. A bad request is a 400
with `raexmc predict`'s line; a model whose files fail while it scores, a 500 with one line."""

from __future__ import annotations

import logging
import os
import socket
from importlib.metadata import version
from pathlib import Path
from typing import Any
from unittest import mock

import mlflow
import numpy as np
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.models import ModelSignature
from mlflow.protos.databricks_pb2 import INTERNAL_ERROR, INVALID_PARAMETER_VALUE
from mlflow.types.schema import AnyType, Array, ColSpec, Object, ParamSchema, ParamSpec, Property, Schema
from packaging.version import Version

import raexmc

from ..errors import DataError, RaexmcError, first_line
from ..io import read_json, writer_gone
from ..rae.queries import checked_k, query_of
from ..settings import PackageSettings
from .tracking.run import from_the_store, readable_store, tracking_uri

DEFAULT_K = 10
SOURCE = "request"  # what errors about a request name in place of a file
# The most records one request may hold. One request is scored on the server's cores while MLflow's scoring
# timeout (60 s) runs: 5,000 records took 53.8 s on 2 cores (measured 2026-11-28), so 1,000 take about 11 s there.
MAX_RECORDS = 1000
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"  # CPU-only wheels (torch 2.13.0+cpu, kin), not on PyPI
# What the model's code imports (faiss: a compressed memory; onnx, onnxruntime: an int8 encoder; pydantic and
# ruamel.yaml: raexmc.settings), beyond what these bring
REQUIREMENTS = ("torch", "transformers", "hnswlib", "faiss-cpu", "onnx", "onnxruntime", "numpy", "scipy", "pandas",
                "mlflow", "pydantic", "ruamel.yaml")
MILVUS_REQUIREMENTS = ("pymilvus", "milvus-lite")  # the extra raexmc[milvus], for a folder on Milvus
# one label of an answer (RaeModel.label_answer): its id is its dataset's, a string, a number or null
LABEL = Object([Property("label", "long"), Property("id", AnyType()), Property("text", "string"),
                Property("score", "double")])
# No input schema: MLflow would make a list of texts a table of one unnamed column and drop it as a column the
# schema does not name, so `predict(["text"])` reached the model as no records. The model reads what it is given
# (request_table); the input example shows the records' form.
SIGNATURE = ModelSignature(outputs=Schema([ColSpec("string", "text"), ColSpec(Array(LABEL), "labels")]),
                           params=ParamSchema([ParamSpec("k", "long", DEFAULT_K)]))
INPUT_EXAMPLE = pd.DataFrame({"text": ["a text to label"]})  # the request a client starts from
WRITER_TAG = "raexmc.writer"  # a logged model's tag: host:pid of the process that logs it


class RequestRefused(MlflowException):
    """A 400 or 500 whose "message" is our one line: MLflow prefixes an MlflowException's message with the whole
    input table, and answers other exceptions with a stack trace."""

    def __init__(self, error: RaexmcError, error_code: int = INVALID_PARAMETER_VALUE):
        self.reason = error.one_line()
        super().__init__(self.reason, error_code=error_code)

    @property
    def message(self) -> str:
        return self.reason

    @message.setter
    def message(self, _prefixed: str) -> None:
        pass  # the server's prefixed message (see the class docstring)


class RaexmcModel(mlflow.pyfunc.PythonModel):
    """The artifact's RaeModel answering texts with labels (a damaged file: 500, the traceback in the log only)."""

    max_records = MAX_RECORDS  # `raexmc serve --max-records` sets it for the model it serves

    def load_context(self, context) -> None:
        from ..rae.shared_batches import RaeModel, SharedBatches  # torch: track, logging the model, need not load it
        self.folder = Path(context.artifacts["model"])
        self.model = RaeModel.load(self.folder)
        self.batches = SharedBatches(self.model)  # the server's worker threads answer their requests together

    # The hint MLflow reads: a DataFrame keeps SIGNATURE (a union would replace it by one of "any" input); the
    # request arrives as the caller gave it (a DataFrame, a dict of columns, a list, a text), read by request_table.
    def predict(self, context, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> pd.DataFrame:
        try:
            queries, k = self.request(request_table(model_input), (params or {}).get("k", DEFAULT_K))
        except RaexmcError as error:
            raise RequestRefused(error) from None
        if not queries:
            return pd.DataFrame({"text": [], "labels": []})
        try:
            results = self.batches.predict(queries, k)
        except RaexmcError as error:
            raise RequestRefused(error, INTERNAL_ERROR) from None
        except Exception as error:  # the server's boundary: the traceback goes to its log, not to the client
            logging.getLogger(__name__).exception("scoring failed")
            fault = DataError(f"the model failed while scoring ({first_line(error, typed=True)}): its files may be "
                              "damaged: rerun the package stage", self.folder)
            raise RequestRefused(fault, INTERNAL_ERROR) from None
        return pd.DataFrame({"text": [self.model.query_text(query) for query in queries], "labels": results})

    def request(self, model_input: pd.DataFrame, k: object) -> tuple[list, int]:
        """The queries and k of a request, checked (DataError, ConfigError); no records, no queries."""
        if len(model_input) and not {"text", "title"} & set(model_input.columns):
            raise DataError('no query: each record needs a "text" (or "title") string', SOURCE)
        if len(model_input) > self.max_records:
            raise DataError(f"{len(model_input):,} records, over the limit of {self.max_records:,} per request "
                            "(raexmc serve --max-records): send them in smaller requests", SOURCE)
        if k == DEFAULT_K:  # the signature's default (MLflow fills it in): every label of a smaller model
            k = min(k, self.model.num_labels)
        queries = [query_of(row, SOURCE, number) for number, row in enumerate(model_input.to_dict("records"))]
        return queries, checked_k(k, self.model.num_labels)


def request_table(model_input: object) -> pd.DataFrame:
    """The request as records: a text or each text of a list one {"text": ...}; a dict columns, dicts records."""
    if isinstance(model_input, pd.DataFrame):
        return model_input
    if isinstance(model_input, str):
        model_input = [model_input]
    try:
        if isinstance(model_input, dict):
            return pd.DataFrame({name: np.atleast_1d(column) for name, column in model_input.items()})
        items = list(model_input)  # a list, a numpy array or a Series (of texts or records)
        if all(isinstance(item, str) for item in items):
            return pd.DataFrame({"text": items})
        return pd.DataFrame(items)
    except (TypeError, ValueError) as error:  # not iterable, columns of different lengths, a list mixing kinds
        raise DataError(f"not texts, records or columns of texts ({first_line(error, typed=True)})", SOURCE) from None


def registered_name(package: PackageSettings, dataset: str) -> str:
    return package.model_name or f"raexmc-{dataset}"


def registered_uri(model_name: str, alias: str) -> str:
    """models:/<name>@<alias> where the store has that alias; else a DataError saying what to run."""
    with readable_store():  # a store that cannot be read is one line, as for a stage
        try:
            mlflow.MlflowClient(tracking_uri()).get_model_version_by_alias(model_name, alias)
        except MlflowException as exc:
            if from_the_store(exc):
                raise
            raise DataError(f"no model registered as {model_name}@{alias}: run the package stage (package.register: "
                            "true) or pass --name/--alias of a registered one", tracking_uri()) from None
    return f"models:/{model_name}@{alias}"


def log_predictor(run_id: str, model: Path, model_name: str, alias: str) -> str:
    """Log folder `model` into run `run_id`, register it as `model_name`, point `alias` at it: its URI."""
    mlflow.set_tracking_uri(tracking_uri())
    code = Path(raexmc.__file__).resolve().parent  # the whole package travels with the model
    client = mlflow.MlflowClient()
    fail_interrupted_logs(client, client.get_run(run_id).info.experiment_id)
    # unchecked: MLflow would load the model (torch, the encoder; 7 CPU s of track) to answer the example, warn if not
    with mlflow.start_run(run_id=run_id), mock.patch("mlflow.models.utils._validate_serving_input"):
        info = mlflow.pyfunc.log_model(
            name="predictor", python_model=str(code / "pipeline" / "pyfunc_model.py"),  # the model as code
            signature=SIGNATURE, input_example=INPUT_EXAMPLE, artifacts={"model": str(model)},
            tags={WRITER_TAG: f"{socket.gethostname()}:{os.getpid()}"}, registered_model_name=model_name,
            code_paths=[str(code)], pip_requirements=pinned_requirements(milvus=on_milvus(model)))
    client.set_registered_model_alias(model_name, alias, info.registered_model_version)
    return f"models:/{model_name}@{alias}"


def fail_interrupted_logs(client: mlflow.MlflowClient, experiment_id: str) -> None:
    """Mark FAILED each model left PENDING by a writer on this host that no longer runs (a killed package stage)."""
    from mlflow.entities import LoggedModelStatus

    page_token = None
    while True:
        page = client.search_logged_models([experiment_id], page_token=page_token)  # no filter matches a status
        for logged in page:
            host, _, pid = logged.tags.get(WRITER_TAG, "").rpartition(":")
            if (logged.status == LoggedModelStatus.PENDING and host == socket.gethostname() and pid.isdigit()
                    and writer_gone(int(pid))):
                client.finalize_logged_model(logged.model_id, LoggedModelStatus.FAILED)
        page_token = page.token
        if not page_token:
            return


def on_milvus(model: Path) -> bool:
    return any(read_json(meta).get("backend") == "milvus" for meta in model.glob("*/meta.json"))


def pinned_requirements(torch_version: str | None = None, milvus: bool = False) -> list[str]:
    """REQUIREMENTS (and Milvus's) pinned to the releases here without local labels (+cpu); with a CPU torch, the
    CPU wheels' index first, since PyPI's Linux torch pulls GBs of CUDA."""
    names = (*REQUIREMENTS, *(MILVUS_REQUIREMENTS if milvus else ()))
    pins = [f"{name}=={Version(version(name)).public}" for name in names]
    if Version(torch_version or version("torch")).local == "cpu":
        return [f"--extra-index-url {CPU_TORCH_INDEX}", *pins]
    return pins
