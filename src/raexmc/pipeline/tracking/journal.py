"""What stages log, kept in a file of JSON lines until one process writes it to the MLflow store (run.py).

Importing MLflow and opening its store costs a stage process some 2.7 CPU s; a stage DVC runs therefore only
appends here, and the track stage, which DVC runs last, writes the journal into the store once (as does a stage
that fails, is killed, needs the run itself, or runs outside DVC). An artifact is kept as a hard link (a copy
across file systems): outputs are replaced by renames, so the link holds the bytes the stage logged."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

JOURNAL = Path(".dvc", "tmp", "raexmc-journal")  # a working copy's, which its stages share one at a time


class Journal:
    """The entries in `folder`, and the files they keep."""

    def __init__(self, folder: Path):
        self.folder, self.lines = folder, folder / "entries.jsonl"

    def append(self, entry: dict[str, Any]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.lines, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")

    def keep(self, path: str | os.PathLike) -> str:
        """A journal's own name for the file at `path` now, under its own file name."""
        self.folder.mkdir(parents=True, exist_ok=True)
        kept = Path(tempfile.mkdtemp(dir=self.folder)) / Path(path).name
        try:
            os.link(path, kept)
        except OSError:
            shutil.copy2(path, kept)
        return str(kept)

    def entries(self) -> list[dict[str, Any]]:
        if not self.lines.is_file():
            return []
        entries = []
        for line in self.lines.read_text(encoding="utf-8").splitlines():
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:
                break  # the last line, cut short by a kill (-9) while it was written
        return entries

    def clear(self) -> None:
        """Forget what was written to the store, the kept files with it."""
        shutil.rmtree(self.folder, ignore_errors=True)
