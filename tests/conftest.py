"""Shared fixtures: a tiny random encoder, tiny datasets on disk, an isolated MLflow store. Plain helpers live in
tests/helpers.py."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import commit_all, dvc, make_lf_folder, make_ngame_folder, new_project, sh


def pytest_addoption(parser):
    parser.addoption("--audit-record", default="", help="where the bad-input audit (tests/audit) writes what a user "
                     "saw in each case that ran, as JSON and Markdown beside it (bench/results/bad_inputs.json)")


@pytest.fixture(scope="session")
def download_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("download-cache")


@pytest.fixture(autouse=True)
def isolated_stores(tmp_path, monkeypatch, download_cache):
    """Every test gets its own MLflow SQLite store; downloads stay in a shared per-run cache. MLflow's global URI
    (mlflow.set_tracking_uri, which `raexmc serve` code sets in-process) would outrank the variable in a later test
    of the same worker, so it is set to the same store."""
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    if "mlflow" in sys.modules:
        sys.modules["mlflow"].set_tracking_uri(store)
    monkeypatch.setenv("RAEXMC_CACHE", str(download_cache))
    monkeypatch.delenv("DVC_ROOT", raising=False)
    monkeypatch.delenv("DVC_EXP_NAME", raising=False)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A 2-layer, 32-wide random BERT with the real MiniLM tokenizer, saved as a local folder."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from raexmc.encoder.model import resolve_encoder

    folder = tmp_path_factory.mktemp("tiny-model")
    tokenizer = AutoTokenizer.from_pretrained(resolve_encoder("all-MiniLM-L6-v2"))
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128)
    with torch.random.fork_rng():  # the same weights whichever tests ran before (training's loss test depends on them)
        torch.manual_seed(0)
        model = BertModel(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def sentence_model(tiny_model, tmp_path_factory) -> Callable[..., Path]:
    """`sentence_model(mode, dense=0)`: the tiny BERT saved by sentence-transformers itself with a Pooling module of
    `mode`, `dense` Dense layers (32 -> 16 -> ..., Tanh, seeded) and a Normalize: that library's own layout."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    built: dict[tuple[str, int], Path] = {}

    def build(mode: str, dense: int = 0) -> Path:
        if (mode, dense) not in built:
            folder = tmp_path_factory.mktemp(f"st-{mode}-{dense}")
            with torch.random.fork_rng():
                torch.manual_seed(1)
                layers = [Dense(32 // 2 ** i, 16 // 2 ** i) for i in range(dense)]
            modules = [Transformer(str(tiny_model)), Pooling(32, pooling_mode=mode), *layers, Normalize()]
            SentenceTransformer(modules=modules, device="cpu").save(str(folder))
            built[mode, dense] = folder
        return built[mode, dense]

    return build


@pytest.fixture
def project(tmp_path, tiny_model) -> Path:
    return new_project(tmp_path, tiny_model)


@dataclass(frozen=True)
class Reproduced:
    """A project after one whole `dvc repro`, committed, and the MLflow store that run logged into
    (outside the project, so that a copy of the project starts with no store of its own)."""

    repo: Path
    store: str
    output: str  # what the `dvc repro` printed (stdout, then stderr)


@pytest.fixture(scope="session")
def reproduced_once(tmp_path_factory, tiny_model, download_cache) -> Reproduced:
    """One real `dvc repro` of the tiny project for every test that starts from a reproduced project:
    each stage is a fresh Python process (seconds of imports), so a repro costs a minute or more."""
    root = tmp_path_factory.mktemp("reproduced")
    repo, store = new_project(root, tiny_model), f"sqlite:///{root / 'mlflow.db'}"
    env = {name: value for name, value in os.environ.items() if name not in ("DVC_ROOT", "DVC_EXP_NAME")}
    ran = dvc("repro", cwd=repo, env={**env, "MLFLOW_TRACKING_URI": store, "RAEXMC_CACHE": str(download_cache)})
    commit_all(repo, "reproduced")
    return Reproduced(repo, store, ran.stdout + ran.stderr)


@pytest.fixture
def reproduced_project(tmp_path, reproduced_once) -> Path:
    """A test's own copy of the reproduced project: `cp -a` keeps the outputs hard-linked to the copy's
    DVC cache, as `dvc repro` left them, and the run cache serves unchanged stages."""
    sh("cp", "-a", str(reproduced_once.repo), str(tmp_path / "repo"), cwd=tmp_path)
    return tmp_path / "repo"


@pytest.fixture
def lf_folder(tmp_path) -> Path:
    return make_lf_folder(tmp_path / "lf")


@pytest.fixture
def ngame_folder(tmp_path) -> Path:
    return make_ngame_folder(tmp_path / "ngame")


