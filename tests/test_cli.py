"""Every command and stage explains itself with --help; user errors are one line and exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import REPO

STAGES = sorted(p.name for p in (REPO / "stages").glob("*.py"))


def run(*args, cwd=REPO):
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True)


def test_raexmc_help_lists_commands():
    out = run(sys.executable, "-m", "raexmc.cli", "--help").stdout
    for command in ("datasets", "show", "preset"):
        assert command in out


@pytest.mark.parametrize("script", STAGES)
def test_stage_help_says_what_it_does(script):
    proc = run(sys.executable, f"stages/{script}", "--help")
    assert proc.returncode == 0, proc.stderr
    first_doc_line = (REPO / "stages" / script).read_text().split('"""')[1].split()[:3]
    assert " ".join(first_doc_line) in " ".join(proc.stdout.split())


def test_stage_user_error_is_one_line_exit_2(tmp_path):
    (tmp_path / "params.yaml").write_text("data:\n  name: nope\ndatasets:\n  foldoc: {source: foldoc}\n")
    proc = run(sys.executable, str(REPO / "stages/download.py"), "--out", "data/nope", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("ConfigError: ")
    assert "unknown dataset 'nope'" in proc.stderr
    assert not (tmp_path / "data").exists()


def test_preset_prints_the_experiment_command():
    proc = run(sys.executable, "-m", "raexmc.cli", "preset", "LF-WikiSeeAlso-320K")
    assert proc.returncode == 0
    assert "-S 'tokenize.input_max_len=128'" in proc.stdout and "-S 'train.lr=0.0002'" in proc.stdout
