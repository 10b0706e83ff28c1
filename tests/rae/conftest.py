"""The tiny pipeline of test_predictor.build_pipeline, built once a session per variant: tests get copies."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from test_predictor import build_pipeline
from tests.helpers import make_lf_folder


@pytest.fixture(scope="session")
def pipelines(tmp_path_factory, tiny_model):
    """`pipelines(tmp_path, backend, input_fields, precision)`: a copy under `tmp_path` (data/ and artifacts/) of
    that pipeline, as build_pipeline(tmp_path, ...) leaves it; its artifacts/tiny folder."""
    roots = {}

    def copy(tmp_path: Path, *key: str) -> Path:
        if key not in roots:
            roots[key] = tmp_path_factory.mktemp("pipeline")
            build_pipeline(roots[key], make_lf_folder(roots[key] / "lf"), tiny_model, *key)
        for name in ("data", "artifacts"):
            shutil.copytree(roots[key] / name, tmp_path / name)
        return tmp_path / "artifacts" / "tiny"
    return copy
