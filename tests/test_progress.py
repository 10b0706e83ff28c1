"""Progress where stderr is a log, not a terminal: a line of its own per redraw, at most LOG_INTERVAL_S apart."""

from __future__ import annotations

import io
import subprocess
import sys

from raexmc.progress import LOG_INTERVAL_S, progress_bar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_in_a_log_each_redraw_is_a_line_checked_at_every_update_and_on_a_terminal_the_bar_is_tqdm_s(monkeypatch):
    """tqdm redraws in place ("\\r", no newline): a log file got one endless line, so an embed stage showed nothing
    for 48 minutes. In a log, a redraw is a line; the time is checked at every update (no skipped updates)."""
    monkeypatch.setattr(sys, "stderr", log := io.StringIO())
    with progress_bar(total=3, desc="embed train", unit="text") as bar:
        assert (bar.mininterval, bar.miniters) == (LOG_INTERVAL_S, 1) and LOG_INTERVAL_S <= 60
        for _ in range(3):
            bar.update(1)
    assert "\r" not in log.getvalue()
    lines = log.getvalue().splitlines()
    assert lines[0].startswith("embed train:   0%") and "0/3" in lines[0]
    assert lines[-1].startswith("embed train: 100%") and "3/3" in lines[-1] and len(lines) == 2
    monkeypatch.setattr(sys, "stderr", terminal := Terminal())
    with progress_bar(total=3, desc="embed train", unit="text", mininterval=2.0) as bar:
        assert bar.mininterval == 2.0 and bar.fp is not None
        bar.update(3)
    assert "\r" in terminal.getvalue(), "redrawn in place"


def test_a_stage_whose_stderr_is_a_file_writes_its_progress_as_lines(project, tmp_path):
    """The tokenize stage run as DVC runs it, its stderr a file: each split's bar gives whole lines."""
    log = tmp_path / "stage.log"
    with log.open("w") as stderr:
        for command in (["stages/download.py", "--out", "data/tiny"],
                        ["stages/tokenize_texts.py", "--dataset", "data/tiny", "--out", "artifacts/tiny/tokens"]):
            subprocess.run([sys.executable, *command], cwd=project, stderr=stderr, check=True)
    text = log.read_bytes().decode()  # not read_text: its universal newlines would read "\r" as "\n"
    assert "\r" not in text, text
    finished = [line for line in text.splitlines() if line.startswith("tokenize train: 100%")]
    assert len(finished) == 1 and "4/4" in finished[0], text  # tests/helpers.py's tiny dataset: 4 train inputs
