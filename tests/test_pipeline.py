"""A real `dvc repro` of the first stages in a fresh temporary git repo, on a tiny dataset."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from ruamel.yaml import YAML

from conftest import REPO, make_lf_folder

pytestmark = pytest.mark.slow


def sh(*args, cwd, check=True):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def dvc(*args, cwd, check=True):
    return sh(sys.executable, "-m", "dvc", *args, cwd=cwd, check=check)


def set_params(repo: Path, **updates) -> None:
    yaml = YAML()
    params = yaml.load(repo / "params.yaml")
    for dotted, value in updates.items():
        node = params
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    yaml.dump(params, repo / "params.yaml")


@pytest.fixture
def project(tmp_path, tiny_model) -> Path:
    """The project's tracked and new files, committed in a fresh git repo, set to a tiny dataset."""
    repo = tmp_path / "repo"
    files = sh("git", "ls-files", "-co", "--exclude-standard", cwd=REPO).stdout.split()
    for name in files:
        if (REPO / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, repo / name)
    sh("git", "init", "-q", cwd=repo)
    set_params(repo, **{"data.name": "tiny",
                        "datasets.tiny": {"source": "local", "path": str(make_lf_folder(tmp_path / "lf"))},
                        "encoder.name": str(tiny_model), "tokenize.input_max_len": 16})
    sh("git", "add", "-A", cwd=repo)
    sh("git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "tiny", cwd=repo)
    return repo


def changed_stages(repo: Path) -> set[str]:
    status = dvc("status", "--json", cwd=repo).stdout
    import json

    return set(json.loads(status))


def test_repro_builds_dataset_and_token_cache(project, tiny_model):
    dvc("repro", "tokenize", cwd=project)
    assert (project / "data/tiny/stats.json").is_file()
    assert (project / "artifacts/tiny/tokens/train.ids.npy").is_file()
    assert changed_stages(project) == set()

    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    runs = client.search_runs([client.get_experiment_by_name("rae-xmc").experiment_id])
    assert len(runs) == 1, "both stages log into one run per pipeline execution"
    metrics = runs[0].data.metrics
    assert metrics["download/N_train"] == 4 and "tokenize/duration_s" in metrics
    assert runs[0].data.params["encoder.name"] == str(tiny_model)

    set_params(project, **{"train.lr": 1e-4, "infer.lambda": 0.3})
    assert changed_stages(project) == set(), "train.* and infer.* must not rerun tokenisation"
    set_params(project, **{"tokenize.input_max_len": 32})
    assert changed_stages(project) == {"tokenize"}
    set_params(project, **{"tokenize.input_max_len": 16, "encoder.name": "all-MiniLM-L6-v2"})
    assert changed_stages(project) == {"tokenize"}


def test_failed_stage_exits_2_and_leaves_no_output(project, tmp_path):
    (tmp_path / "lf" / "lbl.json.gz").write_bytes(b"\x1f\x8b broken")
    proc = dvc("repro", "download", cwd=project, check=False)
    assert proc.returncode != 0
    assert "DataError: " in proc.stderr + proc.stdout and "lbl.json.gz" in proc.stderr + proc.stdout
    assert not (project / "data/tiny").exists()
