"""Fine-tuning on a dataset folder as the train stage runs it (`trainee`, `train_on`), and `fine_tune`: that recipe in
this process on the inputs build_model takes, then build_model of the trained encoder, without DVC."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..data.dataset import Dataset, Text
from ..encoder.device import pick_device
from ..encoder.text_encoder import TextEncoder
from ..encoder.tokens import TokenCache
from ..evaluation.propensity import table_propensity
from ..io import scratch_dir
from ..process_group import DistContext
from ..rae.build import build_model, dataset_folder, token_cache
from ..rae.model import RaeModel, RaeSettings
from ..settings import TrainSection, section_from
from . import train as loop
from .checkpoint import run_fingerprint
from .graph_memory import resolve_grad_cache
from .settings import TrainSettings

# params.yaml's train section (tests/training/test_fine_tune.py holds it to the file)
TRAIN = TrainSection(nproc="auto", torchrun_args="", device="auto", precision="auto", schedule="fixed",
                     batch_size="auto", grad_cache_chunk="auto", lr="auto", max_steps="auto", warmup_steps="auto",
                     weight_decay=0.01, grad_clip=1.0, tau=0.04, hnm_steps="auto", hnm_topk=50, num_hard_negatives=2,
                     hard_negatives=True, instance_negatives=True, val_fraction=0.05, val_b=200,
                     val_max_queries=20000, val_lambda=0.5, validate_last=True, checkpoint_every=50,
                     embed_batch_size="auto", seed=0)


def trainee(name: str, section: TrainSection, cache: TokenCache, ctx: DistContext,
            n_train: Callable[[], int]) -> tuple[TextEncoder, TrainSettings]:
    """The encoder `name` on this process's device at train.precision, cutting inputs where `cache` did, and the
    recipe: the schedule resolved for the world size, gradient caching for this encoder at the cache's lengths."""
    encoder = TextEncoder.load(name, ctx.device, section.precision, max_len=int(cache.meta["key"]["input_max_len"]))
    settings = TrainSettings.from_section(section, n_train, ctx.world_size)
    return encoder, resolve_grad_cache(settings, encoder.model.transformer.config, encoder.precision,
                                       cache.meta["key"], ctx.device)


def train_on(encoder: TextEncoder, name: str, data: Dataset, cache: TokenCache, settings: TrainSettings,
             ctx: DistContext, checkpoint: Path, log: Callable[[int, dict[str, float]], None]) -> list[dict]:
    """The training loop on `data`'s training labels and filters, resuming `checkpoint` only where it is this run's
    (the same encoder, recipe, data, token lengths and world size)."""
    fingerprint = run_fingerprint(name, encoder.recipe, settings, data.stats, cache.meta["key"], ctx.world_size)
    return loop.train(encoder, cache, data.label_matrix("train"), data.filter_matrix("train"), settings, ctx,
                      checkpoint, table_propensity(data.names).ab, log, fingerprint)


def fine_tune(encoder: str | os.PathLike, inputs: Sequence[str | Text] = (),
              labels_of_inputs: Sequence[Sequence[int]] = (), label_texts: Sequence[str | Text] = (), *,
              out: str | os.PathLike, dataset: str | os.PathLike | None = None, train: Mapping[str, Any] = {},
              settings: RaeSettings = RaeSettings(), device: str = "auto", threads: int = 0) -> RaeModel:
    """build_model's model (the same arguments) of `encoder` fine-tuned on those inputs first, by the train stage's
    recipe in this one process on `device`: params.yaml's train section (TRAIN) with the keys in `train` changed,
    e.g. {"max_steps": 50}; its launch keys (nproc, torchrun_args, device) are not read."""
    section = section_from(TrainSection, "train", {**TRAIN.model_dump(), **train})
    with scratch_dir(out) as work:
        data = dataset_folder(work / "data", dataset, inputs, labels_of_inputs, label_texts)
        cache = token_cache(data, encoder, work / "tokens")
        ctx = DistContext(0, 1, pick_device(device))
        trained, recipe = trainee(str(encoder), section, cache, ctx, lambda: int(data.stats["N_train"]))
        train_on(trained, str(encoder), data, cache, recipe, ctx, work / "checkpoint.pt", lambda step, values: None)
        trained.save(work / "encoder")
        return build_model(work / "encoder", inputs, labels_of_inputs, label_texts, out=out, settings=settings,
                           dataset=None if dataset is None else data.folder, device=device, threads=threads)
