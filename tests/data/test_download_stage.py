"""The download stage run as a process on a local dataset: bad input is one line and exit 2 with
nothing written; inputs without labels are counted, and a test split without any is refused; what a
killed run left behind is cleared by the next run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO, TEST, TRAIN, leftover_of_killed_writer, write_jsonl_gz, write_params


def run_download(folder: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    write_params(tmp_path, **{"data.name": "tiny", "data.xc_repo_url": "",
                              "datasets.tiny": {"source": "local", "path": str(folder)}})
    return subprocess.run([sys.executable, str(REPO / "stages/download.py"), "--out", "data/tiny"],
                          cwd=tmp_path, capture_output=True, text=True)


def error_lines(proc: subprocess.CompletedProcess) -> list[str]:
    """stderr without the lines a fresh MLflow store logs about its own creation."""
    return [line for line in proc.stderr.splitlines() if " INFO mlflow." not in line]


def write_split(folder: Path, name: str, rows, without_labels: set[str]) -> None:
    """tests/helpers.py's TRAIN or TEST rows as an LF split, the inputs named in `without_labels` given none."""
    write_jsonl_gz(folder / name, [{"uid": uid, "title": title, "content": content,
                                    "target_ind": [] if uid in without_labels else labels,
                                    "target_rel": [] if uid in without_labels else [1.0] * len(labels)}
                                   for uid, title, content, labels, _ in rows])


def test_bad_input_is_one_line_and_exit_2_with_nothing_written_and_inputs_without_labels_are_kept(lf_folder, tmp_path):
    """A relevance that is not a number; a test split without any label (there is nothing to evaluate). Then a
    good run, which clears what a killed run left."""
    rows = [{"uid": u, "title": t, "content": c, "target_ind": i, "target_rel": r} for u, t, c, i, r in TRAIN]
    rows[2]["target_rel"] = [1.0, "abc"]
    write_jsonl_gz(lf_folder / "trn.json.gz", rows)
    for expected in (f"DataError: {lf_folder / 'trn.json.gz'}:3: target_rel must be a finite number >= 0, got 'abc'",
                     f"DataError: {lf_folder / 'tst.json.gz'}: none of the 2 test inputs has a label: there is "
                     "nothing to evaluate"):
        proc = run_download(lf_folder, tmp_path)
        assert proc.returncode == 2 and error_lines(proc) == [expected], proc.stderr
        assert list((tmp_path / "data").iterdir()) == []
        write_split(lf_folder, "trn.json.gz", TRAIN, set())
        write_split(lf_folder, "tst.json.gz", TEST, {"s0", "s1"})
    # training input t1 and test input s1 lose their labels; they stay (the XC convention: an
    # input without labels still counts in the evaluation's denominator)
    write_split(lf_folder, "trn.json.gz", TRAIN, {"t1"})
    write_split(lf_folder, "tst.json.gz", TEST, {"s1"})
    leftover = leftover_of_killed_writer(tmp_path / "data" / "tiny")
    proc = run_download(lf_folder, tmp_path)
    assert proc.returncode == 0, proc.stderr
    stats = json.loads((tmp_path / "data/tiny/stats.json").read_text())
    assert (stats["N_train"], stats["N_test"]) == (4, 2)
    assert stats["inputs_without_labels"] == {"train": 1, "test": 1}
    assert "inputs without labels (kept): 1 of 4 train, 1 of 2 test" in proc.stderr
    assert not leftover.exists() and [p.name for p in (tmp_path / "data").iterdir()] == ["tiny"]
