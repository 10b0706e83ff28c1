"""The one encoder object (the model, its device and precision, and the tokenizer and max length of raw texts):
training, embedding, mining and a RaeModel all embed through it."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import torch

from .device import AUTO_EMBED_BATCH, autocast, device_kind, resolve_precision
from .layout import write_sentence_config
from .model import check_vocabulary, load_tokenizer
from .sentence import SentenceEncoder, load_encoder
from .tokens import RightPaddedTokenizer, tokenizer_input

# Real tokens per encoder call for raw texts (predict, serve). CPU: 1,024 (8 texts of 128 tokens, 32 of title
# length), where MiniLM fp32 ran fastest per token on an AMD EPYC (2,048-token calls of 32-token texts ran 10-15%
# slower on 1 and 2 threads, and 8 or 16 texts of 128 tokens tied). GPU: the embed stage's auto batch, at 128 tokens.
TEXT_TOKENS = {"cpu": 8 * 128, "cuda": AUTO_EMBED_BATCH["cuda"] * 128}


def length_sorted_batches(lengths: np.ndarray, batch_size: int) -> list[np.ndarray]:
    order = np.argsort(-lengths, kind="stable")
    return [order[start:start + batch_size] for start in range(0, len(order), batch_size)]


def token_batches(lengths: np.ndarray, tokens: int, max_rows: int) -> list[np.ndarray]:
    """Row indices, longest first, in runs of at most `tokens` real tokens and `max_rows` rows (one row at least):
    calls of one size whatever the lengths, as a BERT on a CPU computes on the real tokens alone (SentenceEncoder.
    embed) and a sorted run pads a text only to the run's longest, in attention (and in any other encoder)."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    batches, first, used = [], 0, 0
    for position, length in enumerate(np.asarray(lengths)[order]):
        if position > first and (used + length > tokens or position - first == max_rows):
            batches.append(order[first:position])
            first, used = position, 0
        used += int(length)
    return [*batches, order[first:]] if len(order) else []


def batch_tensors(ids: np.ndarray, lengths: np.ndarray, rows: np.ndarray,
                  device: str) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(int(lengths[rows].max()), 1)
    batch_ids = torch.from_numpy(np.asarray(ids[rows, :width], dtype=np.int64)).to(device)
    mask = (torch.arange(width) < torch.from_numpy(np.asarray(lengths[rows]))[:, None]).long().to(device)
    return batch_ids, mask


class TextEncoder:
    """Unit vectors of token rows or of raw texts (which need `tokenizer` and `max_len`), on a resolved `device`
    and `precision`; at int8 `embed` runs the ONNX model (encoder/int8.py), `encode` (training's) the fp32 one."""

    def __init__(self, model: SentenceEncoder, device: str, precision: str, tokenizer=None, max_len: int | None = None):
        self.model, self.device, self.precision = model, device, precision
        self.tokenizer, self.max_len = tokenizer, max_len
        self._tokenize = None if max_len is None else RightPaddedTokenizer(tokenizer, max_len)
        self._int8 = None
        if precision == "int8":
            from .int8 import Int8Encoder, quantized_bytes  # imports onnxruntime: only an int8 encoder needs it

            self._int8 = Int8Encoder(quantized_bytes(model))

    @classmethod
    def load(cls, name: str | os.PathLike, device: str, precision: str = "auto", max_len: int | None = None,
             stage_output: bool = False) -> TextEncoder:
        """The encoder of `name` on `device`, its tokenizer loaded (and failing) first; `precision` may be auto."""
        precision = resolve_precision(precision, device)
        tokenizer = load_tokenizer(str(name), stage_output)
        model = load_encoder(str(name), device, stage_output)
        check_vocabulary(tokenizer, model.transformer.config.vocab_size, str(name), stage_output)
        return cls(model, device, precision, tokenizer, max_len)

    @property
    def dim(self) -> int:
        return self.model.dim

    @property
    def recipe(self) -> str:
        return self.model.recipe

    def describe(self) -> dict[str, object]:
        """The settings every vector depends on, as runs record them (max_len only where raw texts are tokenised)."""
        settings = {"pooling": self.recipe, "dim": self.dim, "device": self.device, "precision": self.precision}
        return settings if self.max_len is None else {**settings, "max_len": self.max_len}

    def tokenize(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(ids, lengths) of raw texts as the token cache holds them, padded to the longest text."""
        if self._tokenize is None:
            raise ValueError("this encoder was built without a max_len: it embeds token rows only")
        return self._tokenize([tokenizer_input(text, self.max_len) for text in texts])

    def encode(self, ids: np.ndarray, lengths: np.ndarray, rows: np.ndarray) -> torch.Tensor:
        """Vectors of the given rows of a token array, with graph (training)."""
        with autocast(self.device, self.precision):
            return self.model(*batch_tensors(ids, lengths, rows, self.device))

    def embed(self, ids: np.ndarray, lengths: np.ndarray, rows: np.ndarray) -> np.ndarray:
        if self._int8 is not None:
            return self._int8(*batch_tensors(ids, lengths, rows, self.device))
        with torch.inference_mode(), autocast(self.device, self.precision):
            return self.model.embed(*batch_tensors(ids, lengths, rows, self.device)).cpu().numpy()

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors of raw texts in their order, in length-sorted batches of TEXT_TOKENS (token_batches)."""
        ids, lengths = self.tokenize(texts)
        vectors = np.empty((len(texts), self.dim), np.float32)
        kind = device_kind(self.device)  # rows at most the embed stage's auto batch
        for rows in token_batches(lengths, TEXT_TOKENS[kind], AUTO_EMBED_BATCH[kind]):
            vectors[rows] = self.embed(ids, lengths, rows)
        return vectors

    def save(self, folder: str | os.PathLike) -> None:
        """The model in the sentence-transformers layout (with its max length) and its tokenizer, into `folder`."""
        self.model.save(folder)
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(folder)
        if self.max_len is not None:
            write_sentence_config(folder, self.max_len)
