"""Tokenisation: the text recipe of inputs and labels (`text_of`), and the cache of their token ids: per split,
memory-mapped `<split>.ids.npy` (right-padded) and `<split>.len.npy`, the key in `meta.json`. Texts stream in
batches, each cut to a character budget first (memory stays flat), on RAEXMC_WORKERS processes (same cache for any)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from itertools import chain, islice
from pathlib import Path
from typing import Any, get_args

import numpy as np

from ..data.dataset import SPLITS, Dataset, Text, text_record
from ..errors import PARAMS_FILE, ConfigError, DataError
from ..io import atomic_dir, load_array, new_memmap, read_json, write_json
from ..parallel import ordered_map, worker_count
from ..progress import progress_bar
from ..settings import TextFields
from .model import id_setting, tokenizer_fingerprint

FIELDS = get_args(TextFields)
NO_LENGTH_LIMIT = int(1e20)  # a tokenizer's model_max_length from here up (transformers uses 1e20, 1e30) means none
CHARS_PER_TOKEN = 128  # see tokenizer_input
PADDING = "right"  # every row; a cache without this mark may hold a left-padding tokenizer's rows, so it is rebuilt


@dataclass(frozen=True)
class CacheKey:
    """Everything the token ids depend on; a cache is reused only when all of it matches."""

    tokenizer: str
    fingerprint: str
    input_max_len: int
    label_max_len: int
    input_fields: str
    label_fields: str


def check_tokenizer(tokenizer, **max_lens: int) -> None:
    """Each max length must hold the special tokens plus one, and fit the model's longest input (where known)."""
    shortest = tokenizer.num_special_tokens_to_add() + 1
    longest = tokenizer.model_max_length if tokenizer.model_max_length < NO_LENGTH_LIMIT else None
    for key, value in max_lens.items():
        if value < shortest or (longest is not None and value > longest):
            allowed = f"{shortest} to {longest}" if longest is not None else f"at least {shortest}"
            raise ConfigError(f"'tokenize.{key}' is {value}, but the tokenizer takes {allowed} tokens",
                              PARAMS_FILE, f"tokenize.{key}")


def text_of(record: Text, fields: str) -> str:
    if fields == "title":
        return record.title
    return f"{record.title} {record.content}".strip()


def tokenizer_input(text: str, max_len: int) -> str:
    """`text` cut to CHARS_PER_TOKEN x max_len characters: the tokenizer builds tokens and offsets for all it is
    given before it truncates (one 10 MB text: +1.2 GB). The cut keeps the ids when the first max_len words lie
    before it (each word gives a token at least; the word cut only adds tokens truncation drops): 128 characters
    hold WordPiece's longest word (100) and 28 of whitespace."""
    limit = CHARS_PER_TOKEN * max_len
    return text if len(text) <= limit else text[:limit]


def record_input(record: Text, fields: str, max_len: int) -> str:
    """`tokenizer_input` of the record's `text_of`, each field cut to twice the budget before they are joined."""
    limit = 2 * CHARS_PER_TOKEN * max_len
    short = Text(record.uid, record.title[:limit], record.content[:limit])
    return tokenizer_input(text_of(short, fields), max_len)


def pad_id_of(tokenizer) -> int:
    return int(tokenizer.pad_token_id or 0)


class RightPaddedTokenizer:
    """Token ids and lengths of texts, cut at max_len (on the truncation_side) and right-padded whatever the
    padding_side (the encoder reads a row's first `length` ids): the token cache's recipe and the queries'. It calls
    the Rust tokenizer directly (transformers' conversion to lists took half of the stage's time)."""

    def __init__(self, tokenizer, max_len: int):
        from tokenizers import Tokenizer

        # A copy: transformers re-sets padding and truncation on its own backend at every call.
        self.backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
        self.backend.no_padding()
        self.backend.enable_truncation(max_len, strategy="longest_first",
                                       direction=id_setting(tokenizer, "truncation_side"))
        if id_setting(tokenizer, "split_special_tokens"):  # a call-time setting the copy does not carry
            self.backend.encode_special_tokens = True
        self.max_len = max_len
        self.pad_id = pad_id_of(tokenizer)
        self.dtype = np.uint16 if len(tokenizer) <= np.iinfo(np.uint16).max else np.int32

    def __getstate__(self) -> dict[str, Any]:
        """Pickled with the backend as its JSON and the one setting that JSON leaves out."""
        return {**self.__dict__, "backend": (self.backend.to_str(), self.backend.encode_special_tokens)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        from tokenizers import Tokenizer

        backend, encode_special_tokens = state["backend"]
        self.__dict__.update(state, backend=Tokenizer.from_str(backend))
        self.backend.encode_special_tokens = encode_special_tokens

    def __call__(self, texts: Sequence[str], width: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(ids, lengths): `width` (default: the longest text's) ids a row, padded with the pad id."""
        encodings = self.backend.encode_batch(list(texts))
        lengths = np.fromiter((len(encoding) for encoding in encodings), np.int32, len(encodings))
        width = int(lengths.max(initial=0)) if width is None else width
        ids = np.full((len(encodings), width), self.pad_id, self.dtype)
        ids[np.arange(width) < lengths[:, None]] = np.fromiter(
            chain.from_iterable(encoding.ids for encoding in encodings), self.dtype, int(lengths.sum()))
        return ids, lengths


class TokenRows:
    """What each worker runs: blocks (first row, JSON lines) of a split's text file, tokenised into their rows of
    the memmaps (no two overlap)."""

    def __init__(self, tokenize: RightPaddedTokenizer, fields: str, text_path: Path, ids_path: Path,
                 lengths_path: Path):
        self.tokenize, self.fields, self.text_path = tokenize, fields, text_path
        self.paths = (ids_path, lengths_path)
        self._arrays: tuple[np.ndarray, np.ndarray] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_arrays": None}  # each process maps the arrays itself

    def write(self, block: tuple[int, list[str]]) -> int:
        start, lines = block
        texts = [record_input(text_record(line, self.text_path, start + offset), self.fields, self.tokenize.max_len)
                 for offset, line in enumerate(lines, start=1)]
        if self._arrays is None:
            self._arrays = tuple(load_array(path, mmap_mode="r+") for path in self.paths)
        rows = slice(start, start + len(texts))
        self._arrays[0][rows], self._arrays[1][rows] = self.tokenize(texts, width=self.tokenize.max_len)
        return len(texts)


def _line_blocks(path: Path, size: int, count: int) -> Iterator[tuple[int, list[str]]]:
    """The lines of a text file in blocks of `size`, each with its first row; more than `count` is a DataError."""
    with open(path, encoding="utf-8") as handle:
        start = 0
        while lines := list(islice(handle, size)):
            if start + len(lines) > count:
                raise DataError(f"more records than the {count} in stats.json", path)
            yield start, lines
            start += len(lines)


def _tokenize_split(dataset: Dataset, split: str, tokenizer, max_len: int, fields: str, folder: Path,
                    batch_size: int, workers: int) -> float:
    """Tokenise a split into `folder`; the share of its texts that filled max_len (probably cut), for the run log."""
    count, path = dataset.size(split), dataset.text_path(split)
    rows = TokenRows(RightPaddedTokenizer(tokenizer, max_len), fields, path, folder / f"{split}.ids.npy",
                     folder / f"{split}.len.npy")
    new_memmap(rows.paths[0], rows.tokenize.dtype, (count, max_len))  # reserved on disk; the workers write them
    new_memmap(rows.paths[1], np.int32, (count,))
    written = 0
    with progress_bar(total=count, desc=f"tokenize {split}", unit="text", mininterval=1.0) as progress:
        for done in ordered_map(TokenRows.write, rows, _line_blocks(path, batch_size, count), workers):
            written += done
            progress.update(done)
    if written != count:
        raise DataError(f"{written} records, but stats.json says {count}", path)
    lengths = load_array(rows.paths[1], mmap_mode="r")
    return round(float((lengths >= max_len).mean()) if len(lengths) else 0.0, 4)


def build_token_cache(dataset: Dataset, tokenizer, tokenizer_name: str, target: str | os.PathLike,
                      input_max_len: int, label_max_len: int, input_fields: str, label_fields: str,
                      batch_size: int = 2048, workers: int | None = None) -> tuple[dict[str, Any], bool]:
    """(meta, reused): `dataset` tokenised into `target` on `workers` processes, or the cache there of this key."""
    if {input_fields, label_fields} - set(FIELDS):
        raise ValueError(f"text fields are {' or '.join(FIELDS)}, not {input_fields!r} and {label_fields!r}")
    check_tokenizer(tokenizer, input_max_len=input_max_len, label_max_len=label_max_len)
    key = CacheKey(tokenizer_name, tokenizer_fingerprint(tokenizer), input_max_len, label_max_len, input_fields,
                   label_fields)
    target = Path(target)
    if (target / "meta.json").is_file():
        existing = read_json(target / "meta.json")
        if existing.get("key") == asdict(key) and existing.get("padding") == PADDING:
            return existing, True
    plan = {"train": (input_max_len, input_fields), "test": (input_max_len, input_fields),
            "labels": (label_max_len, label_fields)}
    with atomic_dir(target) as folder:
        truncated = {split: _tokenize_split(dataset, split, tokenizer, max_len, fields, folder, batch_size,
                                            worker_count() if workers is None else workers)
                     for split, (max_len, fields) in plan.items()}
        meta = {"key": asdict(key), "padding": PADDING, "pad_token_id": pad_id_of(tokenizer),
                "counts": {split: dataset.size(split) for split in SPLITS}, "truncated": truncated}
        write_json(folder / "meta.json", meta)
    return meta, False


class TokenCache:
    """A token cache's arrays, memory-mapped, each opened once (training reads them at every step)."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        if not (self.folder / "meta.json").is_file():
            raise DataError("not a token cache (no meta.json); run the tokenize stage first", self.folder)
        self.meta = read_json(self.folder / "meta.json")
        self._arrays: dict[str, np.ndarray] = {}

    def ids(self, split: str) -> np.ndarray:
        return self._open(f"{split}.ids.npy")

    def lengths(self, split: str) -> np.ndarray:
        return self._open(f"{split}.len.npy")

    def _open(self, name: str) -> np.ndarray:
        if name not in self._arrays:
            self._arrays[name] = load_array(self.folder / name, mmap_mode="r")
        return self._arrays[name]
