"""Readers of the two public layouts of XMC datasets with label texts (docs/pipeline.md#datasets): LF (the Extreme
Classification Repository's json.gz records) and NGAME text ("label:value" rows after an optional "rows cols"
header), with the same filter files. Records stream; errors name the file and line."""

from __future__ import annotations

import gzip
import json
import math
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DataError
from .dataset import Example, Text

FILTER_FILES = {"train": "filter_labels_train.txt", "test": "filter_labels_test.txt"}
FLOAT32_MAX = float(np.finfo(np.float32).max)


def require_file(path: str | os.PathLike) -> Path:
    path = Path(path)
    if not path.is_file():
        raise DataError("file not found", path)
    return path


def read_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """(line number, line) of a UTF-8 text file, gzipped if it ends in .gz."""
    path = require_file(path)
    opener = gzip.open if path.suffix == ".gz" else open
    line_no = 0
    try:
        with opener(path, "rb") as handle:
            for line_no, raw in enumerate(handle, start=1):
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise DataError(f"invalid UTF-8 at byte {exc.start}", path, line_no) from None
                yield line_no, text.rstrip("\r\n")
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise DataError(f"corrupt gzip data ({exc})", path, line_no + 1) from None


@dataclass
class LayoutReader:
    """What `write_dataset` needs, as lazy iterators over one folder's files."""

    layout: str
    labels: Iterator[Text]
    train: Iterator[Example]
    test: Iterator[Example]
    filters: dict[str, Iterator[tuple[int, int]]]
    files: dict[str, str]


def read_filter(path: Path) -> Iterator[tuple[int, int]]:
    for line_no, line in read_lines(path):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise DataError("expected two non-negative integers 'input label'", path, line_no)
        yield int(parts[0]), int(parts[1])


def _filters(folder: Path) -> dict[str, Iterator[tuple[int, int]]]:
    return {split: read_filter(folder / name) for split, name in FILTER_FILES.items() if (folder / name).is_file()}


def _relevance(raw: object, name: str, path: Path, line_no: int) -> float:
    """`raw` as a relevance, finite and >= 0 as float32 (NaN, inf or a negative would poison every metric)."""
    try:
        value = float(raw) if not isinstance(raw, bool) else math.nan  # type: ignore[arg-type]
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and 0 <= value <= FLOAT32_MAX):
        raise DataError(f"{name} must be a finite number >= 0, got {raw!r}", path, line_no)
    return value


def _json_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for line_no, line in read_lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"malformed JSON ({exc.msg})", path, line_no) from None
        if not isinstance(record, dict):
            raise DataError("expected a JSON object", path, line_no)
        yield line_no, record


def _field(record: dict[str, Any], key: str, kind: type, path: Path, line_no: int, default: Any = None) -> Any:
    value = record.get(key, default)
    if value is None or not isinstance(value, kind):
        raise DataError(f"field '{key}' missing or not {kind.__name__}", path, line_no)
    return value


def _uid(record: dict[str, Any], path: Path, line_no: int) -> str | int:
    """A record's "uid" (a string or an integer, returned beside predictions), or its 0-based line number."""
    uid = record.get("uid", line_no - 1)
    if isinstance(uid, bool) or not isinstance(uid, (str, int)):
        raise DataError(f"field 'uid' must be a string or an integer, got {uid!r}", path, line_no)
    return uid


def _refuse_repeats(labels: list[int], path: Path, line_no: int) -> None:
    """A row listing a label twice is a broken export: the label matrix would add its relevances up."""
    if len(set(labels)) != len(labels):
        twice = next(label for i, label in enumerate(labels) if label in labels[:i])
        raise DataError(f"label index {twice} listed twice", path, line_no)


def _lf_examples(path: Path) -> Iterator[Example]:
    for line_no, record in _json_records(path):
        labels = _field(record, "target_ind", list, path, line_no)
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in labels):
            raise DataError("'target_ind' must be a list of integers", path, line_no)
        _refuse_repeats(labels, path, line_no)
        relevance = record.get("target_rel")
        if relevance is not None:
            if not isinstance(relevance, list) or len(relevance) != len(labels):
                raise DataError("'target_rel' must be a list as long as 'target_ind'", path, line_no)
            relevance = [_relevance(raw, "target_rel", path, line_no) for raw in relevance]
        yield Example(_uid(record, path, line_no), _field(record, "title", str, path, line_no),
                      record.get("content") or "", labels=labels, relevance=relevance, origin=(str(path), line_no))


def read_lf(folder: Path) -> LayoutReader:
    names = {"labels": "lbl.json.gz", "train": "trn.json.gz", "test": "tst.json.gz"}
    files = {key: require_file(folder / name) for key, name in names.items()}
    labels = (Text(_uid(record, files["labels"], line_no), _field(record, "title", str, files["labels"], line_no),
                   record.get("content") or "") for line_no, record in _json_records(files["labels"]))
    return LayoutReader("xc-lf", labels, _lf_examples(files["train"]),
                        _lf_examples(files["test"]), _filters(folder), {k: str(v) for k, v in files.items()})


def _sparse_rows(path: Path, num_labels: int) -> Iterator[tuple[int, list[int], list[float]]]:
    """(line number, label indices, values) per row; a leading "rows cols" header must agree with the file."""
    declared_rows, rows = None, 0
    for line_no, line in read_lines(path):
        tokens = line.split()
        if line_no == 1 and len(tokens) == 2 and all(t.isdigit() for t in tokens):
            declared_rows, declared_labels = int(tokens[0]), int(tokens[1])
            if declared_labels != num_labels:
                raise DataError(f"header says {declared_labels} labels, but Y.txt has {num_labels}", path, line_no)
            continue
        rows += 1
        labels, values = [], []
        for token in tokens:
            index, sep, value = token.partition(":")
            try:
                labels.append(int(index))
            except ValueError:
                raise DataError(f"expected 'label:value', got '{token}'", path, line_no) from None
            values.append(_relevance(value, f"the relevance in '{token}'", path, line_no) if sep else 1.0)
        _refuse_repeats(labels, path, line_no)
        yield line_no, labels, values
    if declared_rows is not None and declared_rows != rows:
        raise DataError(f"header says {declared_rows} rows, but the file has {rows}", path, 1)


def _ngame_examples(text_path: Path, label_path: Path, num_labels: int) -> Iterator[Example]:
    count = 0
    for count, (text, row) in enumerate(zip_longest(read_lines(text_path), _sparse_rows(label_path, num_labels)),
                                        start=1):
        if text is None or row is None:
            longer, line_no = (label_path, row[0]) if text is None else (text_path, text[0])
            raise DataError(f"line count mismatch: {text_path.name} and {label_path.name} differ after "
                            f"{count - 1} records ({longer.name} is longer)", longer, line_no)
        line_no, labels, values = row
        yield Example(count - 1, text[1], "", labels=labels, relevance=values, origin=(str(label_path), line_no))


def read_ngame(folder: Path) -> LayoutReader:
    names = {"labels": "Y.txt", "train": "trn_X.txt", "test": "tst_X.txt",
             "train_labels": "trn_X_Y.txt", "test_labels": "tst_X_Y.txt"}
    files = {key: require_file(folder / name) for key, name in names.items()}
    num_labels = sum(1 for _ in read_lines(files["labels"]))  # counted first, to check the label files' headers
    # a label's id is its 0-based line in Y.txt: the number trn_X_Y.txt and tst_X_Y.txt refer to it by
    return LayoutReader("ngame", (Text(line_no - 1, text, "") for line_no, text in read_lines(files["labels"])),
                        _ngame_examples(files["train"], files["train_labels"], num_labels),
                        _ngame_examples(files["test"], files["test_labels"], num_labels),
                        _filters(folder), {k: str(v) for k, v in files.items()})


def read_layout(folder: str | Path) -> LayoutReader:
    folder = Path(folder)
    if (folder / "trn.json.gz").exists():
        return read_lf(folder)
    if (folder / "trn_X.txt").exists():
        return read_ngame(folder)
    raise DataError("no dataset found: expected trn.json.gz (XC LF layout) or trn_X.txt (NGAME layout)", folder)
