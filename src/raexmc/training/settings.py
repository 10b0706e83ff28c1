"""The training recipe: the `train` section of params.yaml (checked by its loader) with its schedule resolved."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields

from ..settings import TrainSection
from .schedule import KEYS as SCHEDULE_KEYS
from .schedule import Schedule, resolve


@dataclass(frozen=True)
class TrainSettings:
    """The training recipe: params.yaml's `train` section less its launch keys, auto resolved
    (training/schedule.py). Tests and benchmarks `dataclasses.replace` what they vary."""
    batch_size: int           # inputs per device; the global batch is this times the world size
    grad_cache_chunk: int | str  # texts per encoder pass with gradient caching; 0 = off; auto: by memory
    lr: float
    max_steps: int
    warmup_steps: int
    weight_decay: float
    grad_clip: float
    tau: float
    hnm_steps: int
    hnm_topk: int
    num_hard_negatives: int
    hard_negatives: bool
    instance_negatives: bool
    val_fraction: float
    val_b: int
    val_max_queries: int      # held-out inputs that query at a validation (a seeded subset; 0: none)
    val_lambda: float
    validate_last: bool          # a round after the last step only to validate the final encoder
    checkpoint_every: int
    embed_batch_size: int | str  # texts per re-embedding call
    seed: int

    @property
    def mines_negatives(self) -> bool:  # mining rounds may still validate without
        return self.hard_negatives and self.num_hard_negatives > 0

    @property
    def validates(self) -> bool:  # a split held out and queries drawn from it
        return self.val_fraction > 0 and self.val_max_queries > 0

    @property
    def schedule(self) -> Schedule:  # batch_size per process
        return Schedule(**{key: getattr(self, key) for key in SCHEDULE_KEYS})

    @classmethod
    def from_section(cls, train: TrainSection, n_train: Callable[[], int], world_size: int = 1) -> TrainSettings:
        """The recipe of the checked `train` section on `world_size` processes; `n_train()` is asked by auto only."""
        chosen = {key: getattr(train, key) for key in SCHEDULE_KEYS if getattr(train, key) != "auto"}
        resolved = resolve(train.schedule, n_train() if train.schedule == "auto" else 0, world_size, chosen)
        return cls(**{**{f.name: getattr(train, f.name) for f in fields(cls)}, **asdict(resolved)})
