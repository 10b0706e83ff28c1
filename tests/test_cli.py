"""Every command and stage explains itself with --help; user errors are one line and exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from tests.helpers import REPO, make_lf_folder, set_dataset, write_params

STAGES = sorted(p.name for p in (REPO / "stages").glob("*.py"))


def run(*args, cwd=REPO):
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True)


COMMANDS = ["datasets", "show", "schema", "preset", "serve", "results", "evaluate", "sweep", "predict"]


@pytest.mark.parametrize("command", [[], *([name] for name in COMMANDS), *(["stage", script] for script in STAGES)])
def test_help_names_values_readably_and_flags_alone(command):
    """Typer's help gave every flag (--help among them) the type "<bool>" and a repeatable option "<list[str]>".
    `raexmc --help` lists the commands; a stage's help is its script's docstring."""
    args = [f"stages/{command[1]}"] if command[:1] == ["stage"] else ["-m", "raexmc.cli", *command]
    proc = run(sys.executable, *args, "--help")
    out = proc.stdout
    assert proc.returncode == 0 and "Show this message and exit." in out, proc.stderr
    assert "<bool>" not in out and "<list[" not in out, out
    if not command:
        from raexmc.cli import app

        assert sorted(command.callback.__name__ for command in app.registered_commands) == sorted(COMMANDS)
        assert all(name in out for name in COMMANDS), out
    if command[:1] == ["stage"]:
        first_doc_line = (REPO / "stages" / command[1]).read_text().split('"""')[1].split()[:3]
        assert " ".join(first_doc_line) in " ".join(out.split())


def test_datasets_are_listed_in_columns_as_wide_as_their_longest_name(tmp_path):
    """Names past 24 characters pushed their row's source and size out of line."""
    write_params(tmp_path, **{"data.name": "a"})
    long = "lf-amazon-titles-131k-own-copy"
    set_dataset(tmp_path, "a", {"source": "local", "path": "/x"})
    set_dataset(tmp_path, long, {"source": "xcrepo", "path": "/y"})
    proc = run(sys.executable, "-m", "raexmc.cli", "datasets", "--params", str(tmp_path / "params.yaml"),
               "--data-dir", str(tmp_path / "data"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [f"a{' ' * (len(long) - 1)}  local   not built",
                                        f"{long}  xcrepo  not built"]


def test_stage_user_error_is_one_line_exit_2(tmp_path):
    write_params(tmp_path, **{"data.name": "nope"})
    set_dataset(tmp_path, "foldoc", {"source": "foldoc"})
    proc = run(sys.executable, str(REPO / "stages/download.py"), "--out", "data/nope", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "ConfigError: params.yaml:data.name: unknown dataset 'nope': no datasets/nope.yaml (known: foldoc); add "
        "the file to add the dataset")
    assert not (tmp_path / "data").exists()


# Where even root may not write: sysfs refuses to create a file or folder at its top (EPERM, EACCES, or EROFS where
# it is mounted read-only, as in most containers). chmod would not do: the tests run as root, which bypasses it.
DENIED = Path("/sys/raexmc-denied")


@pytest.mark.skipif(not Path("/sys/kernel").is_dir(), reason="needs sysfs, where even root may not write")
def test_a_denied_output_folder_is_one_line_naming_it(tmp_path):
    """A stage whose --out may not be written (permissions, a read-only file system) ended in a traceback:
    user_errors mapped only a full disk. Now one line naming the path, exit 2."""
    yaml = YAML()
    params = yaml.load(REPO / "params.yaml")
    params["data"]["name"] = "tiny"
    yaml.dump(params, tmp_path / "params.yaml")
    set_dataset(tmp_path, "tiny", {"source": "local", "path": str(make_lf_folder(tmp_path / "lf"))})
    proc = run(sys.executable, str(REPO / "stages/download.py"), "--out", str(DENIED / "data"), cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]  # MLflow's INFO lines, creating the store, may come first
    assert line.startswith(f"StorageError: {DENIED}: "), line
    assert line.endswith(": give this user access to it, or write the outputs where this user may write (not on a "
                         "file system mounted read-only), and rerun"), line
    assert not DENIED.exists()
