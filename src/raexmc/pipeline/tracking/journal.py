"""What stages log, as JSON lines until one process writes them to the MLflow store (run.py): importing MLflow costs
a stage some 2.7 CPU s, so a stage DVC runs only appends, and track (run last) writes the journal once. An artifact
is kept as a hard link (outputs are replaced by renames, so it holds the bytes the stage logged)."""

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
