"""The normalised dataset folder the download stage writes and every later stage reads (docs/pipeline.md#datasets):
texts as JSON lines for the tokeniser to stream; nothing dense of shape inputs x labels is ever built."""

from __future__ import annotations

import json
import os
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import count, repeat
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..errors import DataError
from ..io import atomic_dir, load_sparse, read_json, write_json
from .stats import dataset_stats

TEXT_FILES = {"train": "train.jsonl", "test": "test.jsonl", "labels": "labels.jsonl"}
SPLITS = tuple(TEXT_FILES)  # a dataset's texts: training inputs, test inputs, labels (tokenised and embedded alike)


@dataclass
class Text:
    """An input or a label; `uid` is its id in the source it came from."""

    uid: str | int
    title: str
    content: str = ""


@dataclass
class Example(Text):
    """An input with its positive labels and their relevance (1 if unknown); `origin` names its file and line."""

    labels: Sequence[int] = ()
    relevance: Sequence[float] | None = None
    origin: tuple[str, str | int] | None = field(default=None, repr=False)


class _CsrBuilder:
    """CSR rows in growable typed buffers, not a numpy array per row (at 1.3M labels those dominated memory)."""

    def __init__(self) -> None:
        self.indptr, self.indices, self.data = array("q", [0]), array("i"), array("f")

    def add_row(self, cols: np.ndarray, vals: np.ndarray) -> None:
        self.indices.frombytes(np.asarray(cols, np.int32).tobytes())
        self.data.frombytes(np.asarray(vals, np.float32).tobytes())
        self.indptr.append(len(self.indices))

    def build(self, num_cols: int) -> sp.csr_matrix:
        """The matrix, sharing the buffers' memory (nothing is added after this)."""
        matrix = sp.csr_matrix((np.frombuffer(self.data, np.float32), np.frombuffer(self.indices, np.int32),
                                np.frombuffer(self.indptr, np.int64)), shape=(len(self.indptr) - 1, num_cols))
        matrix.sum_duplicates()
        return matrix


def _write_text(handle, record: Text) -> None:
    handle.write(json.dumps({"uid": record.uid, "title": record.title, "content": record.content}, ensure_ascii=False))
    handle.write("\n")


def _write_examples(folder: Path, split: str, examples: Iterable[Example], num_labels: int) -> sp.csr_matrix:
    builder = _CsrBuilder()
    with open(folder / TEXT_FILES[split], "w", encoding="utf-8") as handle:
        for example in examples:
            cols = np.asarray(example.labels, dtype=np.int64)
            bad = cols[(cols < 0) | (cols >= num_labels)]
            rel = (np.ones(len(cols), np.float32) if example.relevance is None
                   else np.asarray(example.relevance, np.float32))
            if len(bad) or len(rel) != len(cols):
                problem = (f"label index {int(bad[0])} outside [0, {num_labels})" if len(bad)
                           else f"{len(cols)} labels but {len(rel)} relevance values")
                raise DataError(problem, *(example.origin or (TEXT_FILES[split], example.uid)))
            builder.add_row(cols, rel)
            _write_text(handle, example)
    return builder.build(num_labels)


def pairs_to_csr(pairs: Iterable[tuple[int, int]], shape: tuple[int, int], origin: str) -> sp.csr_matrix:
    """A boolean CSR filter from (input, label) pairs, checked against the matrix shape."""
    arr = np.asarray(list(pairs), dtype=np.int64).reshape(-1, 2)
    for axis, name in ((0, "input"), (1, "label")):
        bad = np.flatnonzero((arr[:, axis] < 0) | (arr[:, axis] >= shape[axis]))
        if len(bad):
            raise DataError(f"filter {name} index {int(arr[bad[0], axis])} outside [0, {shape[axis]})", origin,
                            int(bad[0]) + 1)
    matrix = sp.csr_matrix((np.ones(len(arr), bool), (arr[:, 0], arr[:, 1])), shape=shape)
    matrix.sum_duplicates()
    return matrix


def write_dataset(target: str | os.PathLike, labels: Iterable[Text], train: Iterable[Example],
                  test: Iterable[Example], filters: dict[str, Iterable[tuple[int, int]]], source: dict[str, Any],
                  filter_origin: dict[str, str] | None = None) -> dict[str, Any]:
    """Write a dataset folder atomically, streamed, `labels` first (it fixes L); its stats."""
    filter_origin = filter_origin or {}
    with atomic_dir(target) as folder:
        num_labels = 0
        with open(folder / TEXT_FILES["labels"], "w", encoding="utf-8") as handle:
            for num_labels, label in enumerate(labels, start=1):
                _write_text(handle, label)
        if num_labels == 0:
            raise DataError("the dataset has no labels", source.get("labels_file", "labels"))
        matrices = {split: _write_examples(folder, split, examples, num_labels)
                    for split, examples in (("train", train), ("test", test))}
        for split, matrix in matrices.items():
            if matrix.shape[0] == 0:
                raise DataError(f"the {split} split is empty", source.get(f"{split}_file", split))
            if split == "test" and matrix.nnz == 0:
                raise DataError(f"none of the {matrix.shape[0]} test inputs has a label: there is nothing to evaluate",
                                source.get("test_labels_file", source.get("test_file", split)))
            sp.save_npz(folder / f"Y_{split}.npz", matrix)
            filt = pairs_to_csr(filters.get(split, ()), matrix.shape, filter_origin.get(split, f"filter_{split}"))
            sp.save_npz(folder / f"filter_{split}.npz", filt)
        stats = dataset_stats(matrices["train"], matrices["test"])
        write_json(folder / "stats.json", stats)
        write_json(folder / "source.json", source)
    return stats


class Dataset:
    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        if not (self.folder / "stats.json").is_file():
            raise DataError("not a dataset folder (no stats.json); run the download stage first", self.folder)
        self.stats: dict[str, Any] = read_json(self.folder / "stats.json")

    @property
    def num_labels(self) -> int:
        return int(self.stats["L"])

    @property
    def source(self) -> dict[str, Any]:  # source.json: where the data came from
        return read_json(self.folder / "source.json")

    @property
    def names(self) -> tuple[str, ...]:
        """Its folder's name, then for a `local` source the folder it was read from (maybe a benchmark's)."""
        names = [self.folder.resolve().name]
        source = self.source if (self.folder / "source.json").is_file() else {}
        if source.get("source") == "local":
            names.append(Path(source["path"]).name)
        return tuple(names)

    def size(self, split: str) -> int:
        return {"train": self.stats["N_train"], "test": self.stats["N_test"], "labels": self.stats["L"]}[split]

    def label_matrix(self, split: str) -> sp.csr_matrix:
        return load_sparse(self.folder / f"Y_{split}.npz")

    def filter_matrix(self, split: str) -> sp.csr_matrix:
        return load_sparse(self.folder / f"filter_{split}.npz")

    def text_path(self, split: str) -> Path:
        return self.folder / TEXT_FILES[split]

    def texts(self, split: str) -> Iterator[Text]:
        """Stream a split's records; parsed inside `map`, so a long line is not kept alive beside its record."""
        path = self.text_path(split)
        with open(path, encoding="utf-8") as handle:
            yield from map(text_record, handle, repeat(path), count(1))


def text_record(line: str, path: str | os.PathLike, number: int) -> Text:
    try:
        obj = json.loads(line)
        return Text(obj["uid"], obj["title"], obj["content"])
    except (json.JSONDecodeError, KeyError, TypeError):
        raise DataError('not a text record {"uid", "title", "content"}: rerun the download stage', path,
                        number) from None
