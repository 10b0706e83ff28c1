"""A broken MLflow store or a full disk ends a real stage process in one line naming the file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, make_lf_folder, small_filesystem, write_params


def new_project(root: Path) -> Path:
    """A DVC project folder whose params point the download stage at the tiny LF dataset."""
    folder = root / "project"
    (folder / ".dvc").mkdir(parents=True)
    lf = make_lf_folder(root / "lf")
    write_params(folder, **{"data.name": "tiny", "data.xc_repo_url": "unused",
                            "datasets.tiny": {"source": "local", "path": str(lf)}})
    return folder


@pytest.fixture
def project(tmp_path) -> Path:
    return new_project(tmp_path)


def download_command(out: Path) -> list[str]:
    return [sys.executable, str(REPO / "stages" / "download.py"), "--out", str(out)]


def download(project: Path, out: Path, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """The real download stage, run as DVC runs it (inside `prefix`, a command that runs another)."""
    return subprocess.run([*prefix, *download_command(out)], cwd=project, capture_output=True, text=True)


def one_line(proc: subprocess.CompletedProcess) -> str:
    """The error line, which must be all there is besides MLflow's notes on creating a new store."""
    lines = [line for line in proc.stderr.strip().splitlines() if " INFO mlflow." not in line]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    return lines[0]


def store_at(path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{path}")


def assert_store_refused(project: Path, store: Path, prefix: tuple[str, ...] = ()) -> str:
    line = one_line(download(project, project / "data" / "tiny", prefix))
    assert line.startswith(f"StorageError: {store}: the MLflow store cannot be used (")
    assert f"mv {store} {store}.broken" in line and "outputs do not depend on it" in line
    assert not (project / "data" / "tiny").exists()
    return line


@pytest.fixture(scope="module")
def whole_store(tmp_path_factory) -> Path:
    """A store the real stage made, with its tables (a test breaks a copy of it)."""
    root = tmp_path_factory.mktemp("whole")
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'whole.db'}"}
    subprocess.run(download_command(root / "first"), cwd=new_project(root), env=env, check=True, capture_output=True)
    return root / "whole.db"


def as_owner_without_privileges() -> tuple[str, ...]:
    """Root reads a file whatever its mode; in a user namespace of its own it keeps owning its files
    but loses that privilege, so mode 000 stops it as it stops anyone else."""
    if os.geteuid() != 0:
        return ()
    if not shutil.which("unshare") or subprocess.run(["unshare", "-U", "true"]).returncode != 0:
        pytest.skip("running as root, with no user namespaces to drop root's privilege in")
    return ("unshare", "-U")


@pytest.mark.parametrize("broken, reason", [("random bytes", "(file is not a database)"), ("a folder", ""),
                                            ("truncated", ""), ("unreadable", "(Permission denied)")])
def test_a_store_that_is_no_database_or_unreadable_is_one_line(project, whole_store, monkeypatch, broken, reason):
    """Truncated: the first pages of a real store, where SQLite finds its header but not its tables' pages."""
    store, prefix = project / "mlflow.db", as_owner_without_privileges() if broken == "unreadable" else ()
    if broken == "random bytes":
        store.write_bytes(bytes(range(256)) * 16)
    elif broken == "a folder":
        store.mkdir()
    elif broken == "truncated":
        store.write_bytes(whole_store.read_bytes()[:8192])
    else:
        shutil.copy(whole_store, store)
        store.chmod(0)
    store_at(store, monkeypatch)
    assert reason in assert_store_refused(project, store, prefix)


def on_small_disk(size: str) -> tuple[str, ...]:
    prefix = small_filesystem(size)
    if prefix is None:
        pytest.skip("no user namespaces here to mount a small filesystem in")
    return prefix


def test_a_full_disk_is_one_line_naming_the_output_or_the_store(project, monkeypatch):
    full = project / "full"
    full.mkdir()
    proc = subprocess.run([*on_small_disk("16k"), str(full), *download_command(full / "tiny")], cwd=project,
                          capture_output=True, text=True)
    line = one_line(proc)
    assert line.startswith(f"StorageError: {full / 'tiny'}") and "No space left on device while writing" in line
    # MLflow cannot even create its tables in 64 KiB: SQLite's "database or disk is full"
    prefix, full = on_small_disk("64k"), project / "full64k"
    full.mkdir()
    store = full / "mlflow.db"
    store_at(store, monkeypatch)
    proc = subprocess.run([*prefix, str(full), *download_command(project / "data" / "tiny")], cwd=project,
                          capture_output=True, text=True)
    line = one_line(proc)
    assert line.startswith(f"StorageError: {store}: the MLflow store cannot be used (database or disk is full)")
    assert "free some space and rerun" in line
    assert not (project / "data" / "tiny").exists()


def test_a_store_that_fills_the_disk_while_logging_is_one_line(project, whole_store, monkeypatch):
    """A real store with its tables, copied onto a small disk that is then filled: the stage runs, and the
    store fails when the metrics are logged. MLflow logs the SQLAlchemy error with its traceback and raises
    it again as an MlflowException, which went past the store check: 589 lines."""
    prefix = on_small_disk("2m")
    full = project / "full"
    full.mkdir()
    store = full / "mlflow.db"
    store_at(store, monkeypatch)
    fill = 'cp "$1" "$0/mlflow.db" && { dd if=/dev/zero of="$0/filler" bs=4k 2>/dev/null; shift; exec "$@"; }'
    proc = subprocess.run([*prefix, str(full), "sh", "-c", fill, str(full), str(whole_store),
                           *download_command(project / "data" / "tiny")], cwd=project, capture_output=True,
                          text=True)
    assert "Traceback" not in proc.stderr and " ERROR mlflow." not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 2  # after the stage's own summary line: it ran, then logging its metrics failed
    assert proc.stderr.strip().splitlines()[-1] == (
        f"StorageError: {store}: the MLflow store cannot be used (database or disk is full): free some space and "
        "rerun; the pipeline's outputs do not depend on it")


@pytest.mark.parametrize("content", [None, bytes(range(256)) * 16, b"SQLite format 3\x00" + bytes(range(256)) * 16])
def test_serve_on_a_broken_store_or_of_an_alias_no_version_carries_is_one_line(tmp_path, monkeypatch, content):
    """`raexmc serve` looked the alias up outside the store check the stages use: a store that is not a
    database (its header, or past a good header) was a 276-line traceback."""
    from typer.testing import CliRunner

    from raexmc.cli import app

    store = tmp_path / "mlflow.db"
    if content is not None:
        store.write_bytes(content)
    store_at(store, monkeypatch)
    write_params(tmp_path, **{"data.name": "tiny"})  # package.model_name null, alias candidate
    alias = ["--alias", "nope", "--port", "5999"] if content is None else []
    result = CliRunner().invoke(app, ["serve", "--params", str(tmp_path / "params.yaml"), *alias])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    if content is None:  # a new store, holding no such alias: the last line, after MLflow's on creating the store
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith("DataError: ") and "raexmc-tiny@nope" in last, result.stderr
        return
    [line] = [line for line in result.stderr.strip().splitlines() if " INFO mlflow." not in line]
    assert line.startswith(f"StorageError: {store}: the MLflow store cannot be used (file is not a database): "), line
    assert f"mv {store} {store}.broken" in line
