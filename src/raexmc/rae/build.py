"""RAE-XMC without DVC: `build_model` makes the zero-shot model `dvc repro` packages, by the stages' own steps at
params.yaml's defaults, from texts and labels or a dataset folder."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from .. import __version__
from ..data.dataset import Dataset, Example, Text, write_dataset
from ..data.sources import build_dataset
from ..encoder.vectors import load_embeddings
from ..io import scratch_dir
from ..memory.indexes import backend_for, build_memory_indexes
from ..memory.input_memory import MemorySettings, build_input_memory
from ..settings import TokenizeSettings
from .model import RaeModel, RaeSettings
from .packaging import package_model

# params.yaml's defaults, for the keys the build reads
TOKENIZE = TokenizeSettings(input_fields="title+content", label_fields="title", input_max_len=128, label_max_len=32,
                            batch_size=2048)
PRECISION, RELEVANCE, EF_SEARCH, GRAPH = "fp32", "binary", 300, {"M": 64, "ef_construction": 500}


def record(item: str | Text, row: int) -> Text:
    """A text as a record whose id is its row; a record as it is."""
    return Text(row, item) if isinstance(item, str) else item


def dataset_folder(target: Path, dataset: str | os.PathLike | None = None, inputs: Sequence[str | Text] = (),
                   labels_of_inputs: Sequence[Sequence[int]] = (), label_texts: Sequence[str | Text] = ()) -> Dataset:
    """`dataset` (the download stage's folder as it is; one in the LF or NGAME layout read into `target`), or the
    texts written there (with a test split of their first labelled input, which the build does not read)."""
    if dataset is not None:
        if not (Path(dataset) / "stats.json").is_file():
            build_dataset(Path(dataset).name, {"source": "local", "path": str(Path(dataset).resolve())}, target, "")
        return Dataset(target if target.is_dir() else dataset)
    if len(inputs) != len(labels_of_inputs):
        raise ValueError(f"{len(inputs)} inputs but {len(labels_of_inputs)} label lists")
    train = [Example(**vars(record(text, row)), labels=labels) for row, (text, labels)
             in enumerate(zip(inputs, labels_of_inputs))]
    write_dataset(target, [record(text, row) for row, text in enumerate(label_texts)], train,
                  [next((example for example in train if example.labels), train[0])] if train else [], {},
                  {"source": "python"})
    return Dataset(target)


def token_cache(dataset: Dataset, encoder: str | os.PathLike, target: Path, tokenize: TokenizeSettings = TOKENIZE):
    """The tokenize stage's token cache of `dataset` for the tokenizer of `encoder`, written to `target`."""
    from ..encoder.model import load_tokenizer
    from ..encoder.tokens import TokenCache, build_token_cache

    build_token_cache(dataset, load_tokenizer(str(encoder)), str(encoder), target, **tokenize.model_dump())
    return TokenCache(target)


def build_model(encoder: str | os.PathLike, inputs: Sequence[str | Text] = (),
                labels_of_inputs: Sequence[Sequence[int]] = (), label_texts: Sequence[str | Text] = (), *,
                out: str | os.PathLike, dataset: str | os.PathLike | None = None,
                settings: RaeSettings = RaeSettings(), device: str = "auto", threads: int = 0) -> RaeModel:
    """The zero-shot RAE model of `encoder` over the inputs and labels, or `dataset`'s; saved to `out` and loaded
    from there (device auto: a GPU if one is visible)."""
    from ..encoder.device import embed_batch_size, pick_device
    from ..encoder.embedding import embed_splits
    from ..encoder.text_encoder import TextEncoder

    with scratch_dir(out) as work:
        data = dataset_folder(work / "data", dataset, inputs, labels_of_inputs, label_texts)
        device = pick_device(device)
        (work / "embeddings").mkdir()
        text_encoder = TextEncoder.load(encoder, device, PRECISION, TOKENIZE.input_max_len)
        embed_splits(text_encoder, token_cache(data, encoder, work / "tokens"), work / "embeddings",
                     embed_batch_size("auto", device))
        backend = backend_for("auto", work / "embeddings")
        build_memory_indexes(work / "embeddings", work / "index", backend, threads=threads, **GRAPH)
        build_input_memory(load_embeddings(work / "embeddings", "train"), None,
                           MemorySettings(1.0, "kmeans-labels", False, 0), work / "memory", backend, threads=threads)
        if device != "cpu":
            text_encoder = TextEncoder.load(encoder, "cpu", PRECISION, TOKENIZE.input_max_len)
        package_model(out, data, text_encoder, work / "index", work / "memory", work / "embeddings", settings,
                      relevance=RELEVANCE, input_fields=TOKENIZE.input_fields, backend=backend, ef_search=EF_SEARCH,
                      about={"dataset": data.names[-1] if dataset else "texts", "raexmc": __version__},
                      threads=threads, **GRAPH)
    return RaeModel.load(out, threads=threads)
