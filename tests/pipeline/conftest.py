"""Fixtures of the tracking tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def project(tmp_path, monkeypatch):
    """An empty DVC project holding only params.yaml, as the working directory (in tests/pipeline, in place of the
    top conftest's whole project)."""
    (tmp_path / ".dvc").mkdir()
    (tmp_path / "params.yaml").write_text("data:\n  name: tiny\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path
