"""What the tune and evaluate tests share: unit vectors, embeddings and a training split on disk, the stages'
processes, the project's params for a toy, and TuneSettings at the tests' defaults."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import scipy.sparse as sp

from raexmc.data.held_out import query_sample, split_validation
from raexmc.evaluation.memory_choice import MemoryTuning
from raexmc.evaluation.tune_settings import TuneSettings
from raexmc.evaluation.validation_memory import held_out_labels
from raexmc.memory.input_memory import MemorySettings
from tests.helpers import REPO, write_params

LAMBDAS = [0.0, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0]
TAUS = [0.02, 0.04, 0.1]


def unit(dim: int, *parts: tuple[int, float]) -> np.ndarray:
    """The unit vector along the (axis, value) `parts`."""
    v = np.zeros(dim)
    for axis, value in parts:
        v[axis] = value
    return v / np.linalg.norm(v)


def unit_rows(rows: np.ndarray) -> np.ndarray:
    return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-30)


def exact_search(queries, keys, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Every query's top-`width` keys by inner product (float32, ties to the smaller id), padded with -1 / -inf."""
    S = (queries @ keys.T).astype(np.float32)
    order = np.argsort(-S, axis=1, kind="stable")[:, :width]
    ids, sims = np.full((len(queries), width), -1, np.int64), np.full((len(queries), width), -np.inf, np.float32)
    ids[:, :order.shape[1]], sims[:, :order.shape[1]] = order, np.take_along_axis(S, order, axis=1)
    return ids, sims


def save_embeddings(folder, X, Z):
    """An embeddings folder of training inputs X and label keys Z, as the embed stage writes it."""
    folder.mkdir()
    np.save(folder / "train.npy", X)
    np.save(folder / "labels.npy", Z)
    return folder


def write_training_split(root, X, Z, Y) -> None:
    """The dataset and embeddings folders with no test split at all: the tune stage must not need one."""
    (root / "data").mkdir()
    (root / "data" / "stats.json").write_text("{}")
    sp.save_npz(root / "data" / "Y_train.npz", Y)
    sp.save_npz(root / "data" / "filter_train.npz", sp.csr_matrix(Y.shape, dtype=bool))
    save_embeddings(root / "emb", X, Z)


def toy_params(folder, **keys):
    """The project's params.yaml with `keys` set (tests.helpers.write_params' dotted keys; a bare key is infer's),
    one validation fold, τ 0.04, the joint retrieval and the full memory unless they say otherwise: most toys hold out
    one set and choose λ at one τ."""
    base = {"infer.val_folds": 1, "infer.tau": 0.04, "infer.retrieval": "joint", "infer.label_share": 0.5,
            "memory.keep": 1.0}
    return write_params(folder, **{**base, **{key if "." in key else f"infer.{key}": v for key, v in keys.items()}})


def run_stage(root, params, name="tune", dataset="data", **options):
    """A stage's process on `root`'s dataset folder (tune: embeddings root/emb, out root/tune)."""
    options = {"embeddings": root / "emb", "out": root / "tune"} if name == "tune" and not options else options
    args = [f"--{key}={value}" for key, value in options.items()]
    return subprocess.run([sys.executable, str(REPO / f"stages/{name}.py"), "--dataset", str(root / dataset),
                           "--params", str(params), *args], capture_output=True, text=True, cwd=root)


def stage_ok(root, params, name, dataset, **options):
    """run_stage, which must succeed."""
    proc = run_stage(root, params, name, dataset, **options)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def tune_settings(**changes) -> TuneSettings:
    """TuneSettings of λ and τ auto on LAMBDAS x TAUS, P@1, b 6, half the inputs held out, with `changes`."""
    base = dict(lam=None, tau=None, lambda_grid=tuple(LAMBDAS), tau_grid=tuple(TAUS), metric="P@1", b=6,
                val_fraction=0.5, val_max_queries=20000, val_seed=0, relevance="binary")
    return TuneSettings(**{**base, **changes})


def tune_metrics() -> dict[str, float]:
    """The metrics of the one MLflow run the tune stage logged into the test's store."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    [run] = client.search_runs([client.get_experiment_by_name("rae-xmc").experiment_id])
    return run.data.metrics


def assert_test_split_unread(root, params, labels, vectors) -> None:
    """The tune stage run again beside a test split (every input of label `labels[i]` at vector `vectors[i]`) that
    would move the choice, were it read, writes the same bytes."""
    names = ("selection.json", "memory_choice.json")
    written = {name: (root / "tune" / name).read_bytes() for name in names}
    width = sp.load_npz(root / "data" / "Y_train.npz").shape[1]
    sp.save_npz(root / "data" / "Y_test.npz", sp.csr_matrix((np.ones(len(labels)), (np.arange(len(labels)), labels)),
                                                            shape=(len(labels), width)))
    sp.save_npz(root / "data" / "filter_test.npz", sp.csr_matrix((len(labels), width), dtype=bool))
    np.save(root / "emb" / "test.npy", np.asarray(vectors, np.float32))
    stage_ok(root, params, "tune", "data", embeddings=root / "emb", out=root / "tune")
    assert {name: (root / "tune" / name).read_bytes() for name in names} == written, "the test split moved it"


def memory_tuning(folder, X, Z, Y, backend: str = "exact", grid=None, **changes) -> MemoryTuning:
    """The tune stage's MemoryTuning at tune_settings(**changes) of (X, Z, Y), one held-out set querying, embeddings
    under `folder`, memory.method random (the settings' seed) keeping the keep at α (0 unless searched)."""
    settings = tune_settings(**changes)
    rest_rows, held_out = split_validation(Y, settings.val_fraction, settings.val_seed)
    held = held_out_labels(Y, sp.csr_matrix(Y.shape), rest_rows, query_sample(held_out, 20000, settings.val_seed))
    return MemoryTuning(save_embeddings(folder / "emb", X, Z), [held], settings, (0.55, 1.5),
                        lambda keep, weight: MemorySettings(keep, "random", False, settings.val_seed,
                                                            prototypes=weight or 0.0), backend, grid)
