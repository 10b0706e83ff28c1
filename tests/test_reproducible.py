"""A fresh clone reproduces the committed outputs: `dvc repro` in a `git clone` of a reproduced and committed
project (its own, empty DVC cache: no run cache, nothing restored) writes the outputs its dvc.lock records, so
`dvc status` and `git status` are clean afterwards. Any time stamp, timing, absolute path or run-to-run
variation (a multi-threaded HNSW build) in an output fails it."""

from __future__ import annotations

import json
import os

import pytest
from ruamel.yaml import YAML

from conftest import dvc, sh

pytestmark = pytest.mark.slow


def output_hashes(lock_path) -> dict[str, str]:
    """{output path: md5} of every stage's outs in a dvc.lock."""
    stages = YAML(typ="safe").load(lock_path)["stages"]
    return {out["path"]: out["md5"] for stage in stages.values() for out in stage.get("outs", [])}


def test_a_fresh_clone_reproduces_the_committed_lock(reproduced_once, tmp_path, download_cache):
    source = reproduced_once.repo
    assert "metrics/tiny/rae.json" in sh("git", "ls-files", cwd=source).stdout.split(), "the headline is in git"
    clone = tmp_path / "clone"
    sh("git", "clone", "-q", str(source), str(clone), cwd=tmp_path)
    assert not (clone / ".dvc" / "cache").exists(), "the clone starts with no DVC cache and no run cache"
    env = {name: value for name, value in os.environ.items() if name not in ("DVC_ROOT", "DVC_EXP_NAME")}
    dvc("repro", cwd=clone, env={**env, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
                                 "RAEXMC_CACHE": str(download_cache)})

    committed, reproduced = output_hashes(source / "dvc.lock"), output_hashes(clone / "dvc.lock")
    assert len(committed) >= 12 and {"artifacts/tiny/index", "artifacts/tiny/eval"} <= set(committed)
    assert reproduced == committed
    assert set(json.loads(dvc("status", "--json", cwd=clone).stdout)) <= {"track"}, "track alone: always_changed"
    assert sh("git", "status", "--porcelain", cwd=clone).stdout == ""
