"""The labels a predictor answers with, each its dataset id (labels.jsonl's `uid`) beside its text: one JSON line
{"id", "text"} per label and each line's byte offset, so the predictor maps the lines and decodes only the labels it
returns (1.3M labels cost 8 bytes each, not a list of strings)."""

from __future__ import annotations

import json
import mmap
import os
from array import array
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ..errors import DataError
from ..io import load_array, save_array
from .dataset import Text

RECORDS_FILE = "label_records.jsonl"
OFFSETS_FILE = "label_offsets.npy"

LabelId = str | int | None


def write_label_records(folder: str | os.PathLike, labels: Iterable[Text]) -> None:
    folder = Path(folder)
    offsets = array("q", [0])
    with open(folder / RECORDS_FILE, "wb") as handle:
        for label in labels:
            line = (json.dumps({"id": label.uid, "text": label.title}, ensure_ascii=False) + "\n").encode()
            handle.write(line)
            offsets.append(offsets[-1] + len(line))
    save_array(folder / OFFSETS_FILE, np.frombuffer(offsets, np.int64))


class LabelRecords:
    """Row -> (id, text) of a memory folder's labels, decoded on demand from the mapped records file."""

    def __init__(self, lines: bytes | mmap.mmap, offsets: np.ndarray, path: Path):
        self.lines, self.offsets, self.path = lines, offsets, path  # the file the lines are, for errors

    @classmethod
    def open(cls, folder: str | os.PathLike) -> LabelRecords:
        folder = Path(folder)
        path = folder / RECORDS_FILE
        offsets = load_array(folder / OFFSETS_FILE)
        size = path.stat().st_size if path.is_file() else -1
        if offsets.ndim != 1 or len(offsets) < 2 or offsets[0] != 0 or offsets[-1] != size:
            raise DataError(f"{RECORDS_FILE} and {OFFSETS_FILE} disagree (or one is missing): rerun the package stage",
                            path)
        with open(path, "rb") as handle:
            return cls(mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ), offsets, path)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, row: int) -> tuple[LabelId, str]:
        """Label `row`'s id and text; a garbled record is a DataError naming the line (in serve: a damaged folder)."""
        try:
            record = json.loads(self.lines[int(self.offsets[row]):int(self.offsets[row + 1])])
        except UnicodeDecodeError:
            raise self._garbled(row, "not UTF-8 text") from None
        except json.JSONDecodeError as exc:
            raise self._garbled(row, f"not valid JSON: {exc.msg}") from None
        label_id = record.get("id", ...) if isinstance(record, dict) else ...
        if not ((label_id is None or isinstance(label_id, (str, int))) and not isinstance(label_id, bool)
                and isinstance(record.get("text"), str)):
            raise self._garbled(row, 'not an object with an "id" string, number or null, and a "text" string')
        return record["id"], record["text"]

    def _garbled(self, row: int, reason: str) -> DataError:
        return DataError(f"garbled label record ({reason}): rerun the package stage", self.path, int(row) + 1)

