"""Fine-tuning on a dataset folder as the train stage runs it: the encoder and its recipe (`trainee`), the loop on the
folder (`train_on`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..data.dataset import Dataset
from ..encoder.text_encoder import TextEncoder
from ..encoder.tokens import TokenCache
from ..evaluation.propensity import table_propensity
from ..process_group import DistContext
from ..settings import TrainSection
from . import train as loop
from .checkpoint import run_fingerprint
from .graph_memory import resolve_grad_cache
from .settings import TrainSettings


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

