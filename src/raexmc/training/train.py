"""Fine-tune the shared encoder with decoupled InfoNCE, hard and in-batch instance negatives, on one CPU,
one GPU or many (torchrun); `trainee` and `train_on` are the recipe around it that the train stage and fine_tune run.

Every rank draws the same global batch, encodes its share and gathers the embeddings, so negatives span the
global batch; each back-propagates the same loss through its own encodings, and one all-reduce sums the shares
into one process's gradient. The loop reads top to bottom; its parts: step.py, rounds.py (mining.py),
checkpoint.py, journal.py.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch

from ..data.dataset import Dataset
from ..data.held_out import query_sample, split_validation
from ..encoder.text_encoder import TextEncoder
from ..encoder.tokens import TokenCache
from ..evaluation.propensity import table_propensity
from ..process_group import DistContext
from ..settings import TrainSection
from .checkpoint import Checkpoint, run_fingerprint
from .graph_memory import resolve_grad_cache
from .journal import Journal
from .rounds import RoundResult, mining_round
from .settings import TrainSettings
from .step import BatchSampler, apply_gradients, make_optimizer, training_step


def train(encoder: TextEncoder, cache: TokenCache, Y: sp.csr_matrix, filters: sp.csr_matrix, settings: TrainSettings,
          ctx: DistContext, checkpoint: Path, propensity_ab: tuple[float, float],
          log: Callable[[int, dict[str, float]], None], fingerprint: str = "") -> list[dict[str, float]]:
    """Train `encoder.model` in place, resuming from `checkpoint` where its fingerprint matches. `log(step,
    metrics)` gets each mining round's row on rank 0; returns every row, an interrupted earlier run's included."""
    if not isinstance(settings.grad_cache_chunk, int):  # a programming error: the stage resolves auto first
        raise ValueError(f"grad_cache_chunk must be resolved (graph_memory.resolve_grad_cache), "
                         f"got {settings.grad_cache_chunk!r}")
    torch.manual_seed(settings.seed)
    params = [p for p in encoder.model.parameters() if p.requires_grad]
    optimizer, scheduler = make_optimizer(params, settings)
    train_rows, val_rows = split_validation(Y, settings.val_fraction, settings.seed)
    val_queries = query_sample(val_rows, settings.val_max_queries, settings.seed)
    sampler = BatchSampler(Y, train_rows, settings.seed)
    global_batch = settings.batch_size * ctx.world_size
    saved = Checkpoint(checkpoint, fingerprint, encoder.model, optimizer, scheduler, settings.checkpoint_every,
                       settings.max_steps, ctx.is_main)
    start = saved.resume(ctx.device)
    journal = Journal(settings, ctx, start.step, start.elapsed_s, start.history, log)

    def mine(step: int, last: int) -> RoundResult:
        """The round at `step`: negatives for the rows that steps step..last-1 draw, and validation."""
        drawn = sampler.rows_drawn(step, last, global_batch) if settings.mines_negatives else np.zeros(0, np.int64)
        return mining_round(encoder, cache, Y, filters, train_rows, val_queries, drawn, settings, ctx,
                            step // settings.hnm_steps, propensity_ab)

    encoder.model.train()
    negatives = start.negatives
    for step in range(start.step, settings.max_steps):
        if negatives is None or step % settings.hnm_steps == 0:
            mined = mine(step, min((step // settings.hnm_steps + 1) * settings.hnm_steps, settings.max_steps))
            negatives = mined.negatives
            journal.mined(step, mined.validation, scheduler.get_last_lr()[0])
        rows, positives = sampler.batch(step, global_batch)
        loss = training_step(encoder, cache, Y, rows, positives, negatives, settings, ctx)
        apply_gradients(params, optimizer, scheduler, settings.grad_clip)
        journal.stepped(float(loss))
        saved.save_if_due(step + 1, negatives, journal.elapsed_s(), journal.history)
    journal.close()
    if settings.validate_last and settings.max_steps > start.step:  # on every rank: it gathers across ranks
        mined = mine(settings.max_steps, settings.max_steps)
        journal.finished(settings.max_steps, mined.validation)
    return journal.history


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
    return train(encoder, cache, data.label_matrix("train"), data.filter_matrix("train"), settings, ctx,
                 checkpoint, table_propensity(data.names).ab, log, fingerprint)
