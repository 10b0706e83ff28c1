"""The labels' ids and texts of a memory folder: written from label records, read back one label at a
time without holding every label in Python objects, and a folder packaged before ids still answers."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest

from raexmc.data.dataset import Text
from raexmc.data.label_records import OFFSETS_FILE, RECORDS_FILE, LabelRecords, write_label_records
from raexmc.errors import DataError

LABELS = [Text(9_007_199_254_740_993, "python"), Text("B00X4WHP5E", "pérl, “quoted” \\ text\n2nd line"),
          Text(0, "unix"), Text("", "")]


def test_every_label_reads_back_with_its_own_id_and_text(tmp_path):
    write_label_records(tmp_path, LABELS)
    records = LabelRecords.open(tmp_path)
    assert len(records) == 4
    assert [records[row] for row in (2, 0, 3, 1)] == [(0, "unix"), (9_007_199_254_740_993, "python"), ("", ""),
                                                     ("B00X4WHP5E", "pérl, “quoted” \\ text\n2nd line")]
    assert records[np.int64(1)][0] == "B00X4WHP5E", "rows come from numpy arrays"
    lines = (tmp_path / RECORDS_FILE).read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0]) == {"id": 9_007_199_254_740_993, "text": "python"}
    assert len(lines) == 4, "a newline inside a text is escaped: one line per label"


DAMAGE = {"no offsets": lambda folder: (folder / OFFSETS_FILE).unlink(),
          "no records": lambda folder: (folder / RECORDS_FILE).unlink(),
          "cut records": lambda folder: (folder / RECORDS_FILE).write_bytes((folder / RECORDS_FILE).read_bytes()[:-1]),
          "other offsets": lambda folder: np.save(folder / OFFSETS_FILE, np.array([0, 10, 20]))}


@pytest.mark.parametrize("damage", DAMAGE)
def test_records_that_disagree_with_their_offsets_are_refused(tmp_path, damage):
    write_label_records(tmp_path, LABELS)
    DAMAGE[damage](tmp_path)
    with pytest.raises(DataError, match="rerun the package stage|rerun the stage that writes it") as info:
        LabelRecords.open(tmp_path)
    assert str(tmp_path) in str(info.value)


def test_opening_many_labels_holds_their_offsets_not_their_texts(tmp_path):
    """200k labels: opening allocates the offsets (1.6 MB) and little else; the texts stay in the mapped file
    (a list of 200k strings would take over 10 MB)."""
    count = 200_000
    write_label_records(tmp_path, (Text(f"uid-{row}", f"label number {row} of many") for row in range(count)))
    tracemalloc.start()
    try:
        records = LabelRecords.open(tmp_path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * (count + 1) + 1_000_000
    assert records[count - 1] == (f"uid-{count - 1}", f"label number {count - 1} of many")


@pytest.mark.parametrize("record, reason", [
    *((garble * 64, None) for garble in (b"\x00", b"\xff", b"[", b"}")),
    *((text.encode(), 'not an object with an "id" string, number or null, and a "text" string')
      for text in ('["unix", 0]', '{"id": 0}', '{"id": 0, "text": 5}', '{"id": [0], "text": "u"}'))])
def test_a_garbled_record_of_the_right_size_is_one_line_naming_it(tmp_path, record, reason):
    """The sizes agree, so opening passes; reading label 3 gave a traceback in predict and a 400 with a stack
    trace in serve. Now one DataError names the file and the line and says which stage writes it."""
    write_label_records(tmp_path, LABELS)
    path = tmp_path / RECORDS_FILE
    lines = path.read_bytes().splitlines(keepends=True)
    lines[2] = record[:len(lines[2]) - 1].ljust(len(lines[2]) - 1) + b"\n"
    path.write_bytes(b"".join(lines))
    records = LabelRecords.open(tmp_path)
    assert records[1][0] == "B00X4WHP5E", "the other records still read"
    with pytest.raises(DataError) as garbled:
        records[np.int64(2)]
    line = garbled.value.one_line()
    assert line.startswith(f"DataError: {path}:3: garbled label record (") and line.endswith(
        "): rerun the package stage"), line
    assert reason is None or f"({reason})" in line
