"""Top-k labels for new texts from a built pipeline, everything loaded once for many queries.

A predictor is three folders: the encoder (written by the train stage), the index stage's folder (the
inputs' and the labels' index, merged into one joint search) and the memory folder the package stage writes
(with a smaller memory, memory.keep < 1, its input keys' index and member counts, and with a compressed one,
memory.compression, its input keys' and labels' indexes, which replace the index stage's): the inference settings (the text recipe of the inputs among them), the values' training part Y_train, the labels'
ids and texts (data/label_records.py), the keys when the index is exact (that backend keeps none) and the per-query λ model, which
scores each query at its own λ when the settings' `query_lambda` is true (else the scalar λ). Queries are turned into text
by the same recipe as the training inputs (`encoder.tokens.text_of`), so a Titles dataset's model sees only
a query's title, as in training. The same three folders make the MLflow model (pipeline/serving.py), less
the index stage's indexes that the memory's own replace, so `raexmc predict` and a served model answer alike.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from ..data.dataset import Text
from ..data.label_records import LabelRecords
from ..encoder.device import pick_device
from ..encoder.text_encoder import TextEncoder
from ..encoder.tokens import text_of
from ..errors import DataError
from ..memory.indexes import INDEXED_KEY_SETS, backend_for, memory_backend
from ..memory.input_memory import own_index_folders
from ..memory.predictor_folder import read_settings
from .model import best_labels
from .model_folder import load_model
from .queries import checked_k
from .timing import Timing


def index_key_sets_read(memory: str | os.PathLike) -> tuple[str, ...]:
    """The index stage's key sets whose index a predictor over `memory` loads: those it has none of its own for."""
    own = own_index_folders(memory)
    return tuple(key_set for key_set in INDEXED_KEY_SETS if key_set not in own)


def graphs_to_build(index: str | os.PathLike, memory: str | os.PathLike, setting: str,
                    embeddings: str | os.PathLike) -> tuple[str, ...]:
    """The index stage's key sets whose HNSW graph the package stage builds for a predictor over `memory`, since
    predict and serve search on the CPU: those the predictor reads from the index stage (index_key_sets_read)
    when that stage kept exact indexes for a GPU's search (`search.device`) where `index.backend` (`setting`)
    would build graphs on the CPU; none otherwise (the index stage's own indexes serve as they are)."""
    if memory_backend(index) != "exact" or backend_for(setting, embeddings) != "hnsw":
        return ()
    return index_key_sets_read(memory)


class Predictor:
    """RAE-XMC label scores for raw texts: encode, then the memory folder's RAE model (rae/model.py) retrieves b
    keys (the joint top-b, or a split share of the input and the label keys: the settings' retrieval) and scores
    them, p = softmax(q.k / tau) over them, scores = p . V, as the evaluate stage does for the test set."""

    def __init__(self, encoder: str | os.PathLike, index: str | os.PathLike | None, memory: str | os.PathLike,
                 device: str = "auto", threads: int = 0):
        """`index` is the index stage's folder (None when the memory's own indexes replace both of its)."""
        self.settings = read_settings(memory)
        self.labels = LabelRecords.open(memory)
        if len(self.labels) != self.settings["num_labels"]:
            raise DataError(f"{len(self.labels)} label records for {self.settings['num_labels']} labels: "
                            "rerun the package stage", memory)
        # a smaller or compressed memory's own indexes, in place of the index stage's
        self.rae = load_model(memory, index, threads)
        self.index = self.rae.search
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # one-line stderr for `raexmc predict`
        self.encoder = TextEncoder.load(encoder, pick_device(device, "<arguments>", "--device"), "auto",
                                        int(self.settings["input_max_len"]), stage_output=True)

    def query_text(self, query: Text | str) -> str:
        """The text the encoder sees for a query: a record goes through the training inputs' recipe
        (title, or title + content); a plain string is taken as it is."""
        return query if isinstance(query, str) else text_of(query, self.settings["input_fields"])

    def embed(self, texts: list[str]) -> np.ndarray:
        """Query embeddings, tokenised as the token cache does (same max length, same special tokens)."""
        return self.encoder.embed_texts(texts)

    def predict(self, queries: list[Text | str], k: int = 10) -> tuple[list[list[dict[str, Any]]], Timing]:
        """Per query, its top-k labels as {"label": row, "id": the label's id in its dataset, "text": label text,
        "score": p.V}, best first."""
        k = checked_k(k, len(self.labels))
        timing = Timing(queries=len(queries))
        if not queries:
            return [], timing
        started = time.perf_counter()
        queries = self.embed([self.query_text(query) for query in queries])
        encoded = time.perf_counter()
        keys = self.rae.retrieve(queries)
        searched = time.perf_counter()
        labels, values = best_labels(self.rae.scores(*keys), k)
        results = [[self.label_answer(label, value) for label, value in zip(row_labels, row_values) if label >= 0]
                   for row_labels, row_values in zip(labels, values)]  # -1 pads a row with fewer labels scored
        timing.encode_s, timing.search_s = encoded - started, searched - encoded
        timing.score_s = time.perf_counter() - searched
        return results, timing

    def label_answer(self, row: int, score: float) -> dict[str, Any]:
        """One label of an answer: its row (column in the label matrices), its own id and text, its score."""
        label_id, text = self.labels[row]
        return {"label": int(row), "id": label_id, "text": text, "score": round(float(score), 6)}
