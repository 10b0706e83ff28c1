"""Fine-tune the shared encoder with decoupled InfoNCE, hard and in-batch instance negatives, on one CPU, one GPU
or many (torchrun); `trainee` and `train_on` are the recipe around it that the train stage and fine_tune run.

Every rank draws the same global batch, encodes its share and gathers the embeddings, so negatives span the global
batch; each back-propagates the same loss through its own encodings, and one all-reduce sums the shares into one
process's gradient. The loop reads top to bottom; its parts: step.py, rounds.py, checkpoint.py, and the Journal
of what it reports on rank 0 (below).
"""

from __future__ import annotations

import time
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
from ..progress import progress_bar
from ..settings import TrainSection
from .checkpoint import Checkpoint, run_fingerprint
from .graph_memory import resolve_grad_cache
from .rounds import mining_round
from .settings import TrainSettings
from .step import BatchSampler, apply_gradients, make_optimizer, training_step


class Journal:
    """What the loop reports on rank 0: the current window (loss and throughput since the last mining round), the
    history of logged rows (in the checkpoint, so a resumed run returns its interrupted start's rows too), the bar."""

    def __init__(self, settings: TrainSettings, ctx: DistContext, start_step: int, elapsed_s: float,
                 history: list[dict[str, float]], log: Callable[[int, dict[str, float]], None]):
        self.is_main, self.start_step = ctx.is_main, start_step
        self.global_batch = settings.batch_size * ctx.world_size
        self.history, self.log = history, log
        self.bar = progress_bar(total=settings.max_steps, initial=start_step, desc="train", unit="step",
                                disable=not ctx.is_main, mininterval=2.0)
        self.started = time.perf_counter() - elapsed_s
        self._open_window()

    def _open_window(self) -> None:
        self.window_start, self.window_loss, self.window_steps = time.perf_counter(), 0.0, 0

    def _window_loss(self) -> float:
        return self.window_loss / max(self.window_steps, 1)

    def elapsed_s(self) -> float:  # those before a resume included
        return time.perf_counter() - self.started

    def _record(self, step: int, values: dict[str, float]) -> None:
        if self.is_main:
            self.history.append({"step": step, **values})
            self.log(step, values)

    def mined(self, step: int, validation: dict[str, float], lr: float) -> None:
        """A mining round ran before `step`: log the window it closes (none at the start) and open the next."""
        seconds = time.perf_counter() - self.window_start
        window = {"loss": self._window_loss(), "lr": lr,
                  "examples_per_s": self.window_steps * self.global_batch / max(seconds, 1e-9)}
        self._record(step, {**(window if step > self.start_step else {}), "elapsed_s": self.elapsed_s(), **validation})
        self._open_window()

    def stepped(self, loss: float) -> None:
        self.window_loss += loss
        self.window_steps += 1
        self.bar.update(1)
        self.bar.set_postfix(loss=f"{loss:.3f}", refresh=False)

    def close(self) -> None:
        self.bar.close()

    def finished(self, step: int, validation: dict[str, float]) -> None:
        """The round after the last step: log the last window's loss with its validation."""
        self._record(step, {"loss": self._window_loss(), "elapsed_s": self.elapsed_s(), **validation})


def as_table(history: list[dict[str, float]]) -> list[dict[str, float | None]]:
    """The history with every column in every row (None where a round had none): DVC plots only matching rows."""
    columns = sorted({column for row in history for column in row})
    return [{column: row.get(column) for column in columns} for row in history]


def train(encoder: TextEncoder, cache: TokenCache, Y: sp.csr_matrix, filters: sp.csr_matrix, settings: TrainSettings,
          ctx: DistContext, checkpoint: Path, propensity_ab: tuple[float, float],
          log: Callable[[int, dict[str, float]], None], fingerprint: str = "") -> list[dict[str, float]]:
    """Train `encoder.model` in place, resuming from `checkpoint` where its fingerprint matches. `log(step,
    metrics)` gets each mining round's row on rank 0; returns every row, an interrupted earlier run's included."""
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

    def mine(step: int, last: int) -> tuple[np.ndarray, dict[str, float]]:
        """The round at `step`: negatives for the rows that steps step..last-1 draw, and validation."""
        drawn = sampler.rows_drawn(step, last, global_batch) if settings.mines_negatives else np.zeros(0, np.int64)
        return mining_round(encoder, cache, Y, filters, train_rows, val_queries, drawn, settings, ctx,
                            step // settings.hnm_steps, propensity_ab)

    encoder.model.train()
    negatives = start.negatives
    for step in range(start.step, settings.max_steps):
        if negatives is None or step % settings.hnm_steps == 0:
            negatives, validation = mine(step, min((step // settings.hnm_steps + 1) * settings.hnm_steps,
                                                   settings.max_steps))
            journal.mined(step, validation, scheduler.get_last_lr()[0])
        rows, positives = sampler.batch(step, global_batch)
        loss = training_step(encoder, cache, Y, rows, positives, negatives, settings, ctx)
        apply_gradients(params, optimizer, scheduler, settings.grad_clip)
        journal.stepped(float(loss))
        saved.save_if_due(step + 1, negatives, journal.elapsed_s(), journal.history)
    journal.close()
    if settings.validate_last and settings.max_steps > start.step:  # on every rank: it gathers across ranks
        journal.finished(settings.max_steps, mine(settings.max_steps, settings.max_steps)[1])
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
