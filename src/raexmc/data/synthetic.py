"""A seeded synthetic dataset of any shape, to measure time and memory offline at the paper's scale
(docs/pipeline.md#datasets). Every chunk has its own random stream (seed, split, chunk), so the output depends on
the parameters alone, however many processes make it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ..parallel import ordered_map, worker_count
from ..progress import progress_bar
from .catalogue import EntryCheck
from .dataset import Example, Text, write_dataset

CHUNK = 32_768                 # inputs or labels generated at once
SYLLABLES = [c + v for c in "bdfghjklmnprstvz" for v in "aeiou"]
WORD_ZIPF = 1.0                # exponent of word frequency by rank
TOPIC_POWER = 0.5              # exponent of topic popularity by rank
LABEL_POWER = 1.0              # exponent of label popularity by rank within its topic
SIGNATURE_WORDS = 2            # words naming a label in its title
BORROWED_WORDS = 3             # labels whose signature word an input's title carries
STREAMS = {"labels": 0, "train": 1, "test": 2, "topics": 3, "signatures": 4}
UID_PREFIX = {"labels": "lbl", "train": "trn", "test": "tst"}
_DEFAULTS = {"seed": 0, "vocab_size": 50_000, "topic_size": 256}
_REQUIRED = ("n_train", "n_test", "n_labels", "labels_per_input", "input_words", "label_words")
_MIN_WORDS = {"input_words": 1 + BORROWED_WORDS, "label_words": 1 + SIGNATURE_WORDS}


class Chunk(NamedTuple):
    """Records [start, stop) of a split, chunk `number` of it (which names its random stream)."""

    split: str
    number: int
    start: int
    stop: int


@dataclass(frozen=True)
class SyntheticShape:  # a dataset entry with source: synthetic
    n_train: int
    n_test: int
    n_labels: int
    labels_per_input: float
    input_words: tuple[int, int]
    label_words: tuple[int, int]
    seed: int
    vocab_size: int
    topic_size: int


def parse_shape(name: str, spec: dict[str, Any]) -> SyntheticShape:
    """Check a dataset entry; a bad value is a ConfigError naming its key."""
    check = EntryCheck(name, spec, "synthetic", (*_REQUIRED, *_DEFAULTS), _DEFAULTS)
    values, fail, integer = check.values, check.fail, check.integer
    for key in _REQUIRED:
        if values.get(key) is None:
            raise fail(key, f"a synthetic dataset needs '{key}'")

    def word_range(key: str) -> tuple[int, int]:
        value, low = values[key], _MIN_WORDS[key]
        if (not isinstance(value, list) or len(value) != 2
                or any(isinstance(v, bool) or not isinstance(v, int) for v in value)
                or not low <= value[0] <= value[1]):
            raise fail(key, f"'{key}' must be [min, max] words with {low} <= min <= max, got {value!r}")
        return value[0], value[1]

    n_labels = integer("n_labels", 1)
    topic_size = min(integer("topic_size", 1), n_labels)
    mean = values["labels_per_input"]
    if isinstance(mean, bool) or not isinstance(mean, (int, float)) or not 1 <= mean <= topic_size:
        raise fail("labels_per_input", f"'labels_per_input' must be a number in [1, topic_size={topic_size}], "
                                       f"got {mean!r}")
    return SyntheticShape(integer("n_train", 1), integer("n_test", 1), n_labels, float(mean), word_range("input_words"),
                          word_range("label_words"), integer("seed", 0), integer("vocab_size", len(SYLLABLES) * 10),
                          topic_size)


def pseudo_word(rank: int) -> str:
    """The word of a vocabulary rank: its digits in base len(SYLLABLES), one syllable each."""
    syllables = []
    while True:
        syllables.append(SYLLABLES[rank % len(SYLLABLES)])
        rank = rank // len(SYLLABLES) - 1
        if rank < 0:
            return "".join(reversed(syllables))


def _power_cdf(size: int, exponent: float) -> np.ndarray:
    """Cumulative probabilities of ranks 1..size weighted rank**-exponent, for searchsorted draws."""
    cdf = np.cumsum(np.arange(1, size + 1, dtype=np.float64) ** -exponent)
    return cdf / cdf[-1]


class SyntheticGenerator:
    """Streams the labels and each split's inputs, chunks made on `workers` processes (each its own stream)."""

    def __init__(self, shape: SyntheticShape, workers: int = 1):
        self.shape, self.workers = shape, workers
        self.vocab = [pseudo_word(rank) for rank in range(shape.vocab_size)]
        self.word_cdf = _power_cdf(shape.vocab_size, WORD_ZIPF)
        self.num_topics = -(-shape.n_labels // shape.topic_size)
        self.topic_cdf = _power_cdf(self.num_topics, TOPIC_POWER)
        self.label_log_weight = -LABEL_POWER * np.log(np.arange(1, shape.topic_size + 1, dtype=np.float64))
        # Topic and signature words come from below the most frequent ranks, as content words do.
        content_words = (shape.vocab_size // 50, shape.vocab_size)
        self.topic_word = self._rng("topics").integers(*content_words, size=self.num_topics)
        self.signature = self._rng("signatures").integers(*content_words, size=(shape.n_labels, SIGNATURE_WORDS))

    def _rng(self, stream: str, chunk: int = 0) -> np.random.Generator:
        return np.random.default_rng([self.shape.seed, STREAMS[stream], chunk])

    def _chunks(self, split: str, count: int,
                make: Callable[[SyntheticGenerator, Chunk], Any]) -> Iterator[tuple[np.ndarray, Any]]:
        """The record numbers of each chunk of a split with `make`'s result for it, in order."""
        chunks = [Chunk(split, number, start, min(start + CHUNK, count))
                  for number, start in enumerate(range(0, count, CHUNK))]
        with progress_bar(total=count, desc=f"synthetic {split}", unit="text", mininterval=2.0) as progress:
            for result, chunk in zip(ordered_map(make, self, chunks, self.workers), chunks):
                yield np.arange(chunk.start, chunk.stop), result
                progress.update(chunk.stop - chunk.start)

    def _titles(self, rng: np.random.Generator, words: np.ndarray, lengths: tuple[int, int]) -> list[str]:
        counts = rng.integers(lengths[0], lengths[1] + 1, size=len(words))
        vocab = self.vocab
        return [" ".join([vocab[w] for w in row[:n]]) for row, n in zip(words.tolist(), counts.tolist())]

    def _zipf_words(self, rng: np.random.Generator, rows: int, columns: int) -> np.ndarray:
        return np.searchsorted(self.word_cdf, rng.random((rows, columns)), side="right")

    def label_titles(self, chunk: Chunk) -> list[str]:
        rng, ids = self._rng(chunk.split, chunk.number), np.arange(chunk.start, chunk.stop)
        words = self._zipf_words(rng, len(ids), self.shape.label_words[1])
        words[:, 0] = self.topic_word[ids // self.shape.topic_size]
        words[:, 1:1 + SIGNATURE_WORDS] = self.signature[ids]
        return self._titles(rng, words, self.shape.label_words)

    def labels(self) -> Iterator[Text]:
        for ids, titles in self._chunks("labels", self.shape.n_labels, SyntheticGenerator.label_titles):
            for label, title in zip(ids.tolist(), titles):
                yield Text(f"{UID_PREFIX['labels']}{label}", title)

    def _label_sets(self, rng: np.random.Generator, rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each input's topic, and its labels as CSR (indptr, sorted label ids)."""
        size = self.shape.topic_size
        topics = np.searchsorted(self.topic_cdf, rng.random(rows), side="right")
        members = topics[:, None] * size + np.arange(size)
        in_topic = np.minimum(size, self.shape.n_labels - topics * size)
        counts = np.minimum(rng.geometric(1.0 / self.shape.labels_per_input, rows), in_topic)
        keys = self.label_log_weight + rng.gumbel(size=(rows, size))
        keys[members >= self.shape.n_labels] = -np.inf
        kth_largest = np.take_along_axis(np.sort(keys, axis=1), (size - counts)[:, None], axis=1)
        chosen = keys >= kth_largest
        indptr = np.concatenate([[0], np.cumsum(chosen.sum(axis=1))])
        return topics, indptr, members[chosen]

    def example_rows(self, chunk: Chunk) -> tuple[list[str], np.ndarray, np.ndarray]:
        """The titles of a chunk of inputs and their labels as CSR (indptr, label ids)."""
        rng, rows = self._rng(chunk.split, chunk.number), chunk.stop - chunk.start
        topics, indptr, labels = self._label_sets(rng, rows)
        words = self._zipf_words(rng, rows, self.shape.input_words[1])
        words[:, 0] = self.topic_word[topics]
        per_row = np.diff(indptr)
        for column in range(1, 1 + BORROWED_WORDS):
            picked = labels[indptr[:-1] + (rng.random(rows) * per_row).astype(np.int64)]
            words[:, column] = self.signature[picked, rng.integers(0, SIGNATURE_WORDS, size=rows)]
        return self._titles(rng, words, self.shape.input_words), indptr, labels

    def examples(self, split: str, count: int) -> Iterator[Example]:
        for ids, (titles, indptr, labels) in self._chunks(split, count, SyntheticGenerator.example_rows):
            for row, (number, title) in enumerate(zip(ids.tolist(), titles)):
                yield Example(f"{UID_PREFIX[split]}{number}", title, labels=labels[indptr[row]:indptr[row + 1]])


def write_synthetic(name: str, spec: dict[str, Any], target: str | Path, workers: int | None = None) -> dict[str, Any]:
    """Write synthetic dataset `name` to `target` on `workers` processes (default: every core); its stats."""
    shape = parse_shape(name, spec)
    generator = SyntheticGenerator(shape, worker_count() if workers is None else workers)
    source = {"name": name, "source": "synthetic", **asdict(shape)}
    return write_dataset(target, generator.labels(), generator.examples("train", shape.n_train),
                         generator.examples("test", shape.n_test), {}, source)
