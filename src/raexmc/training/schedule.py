"""The training schedule (batch, learning rate, steps, warm-up, mining interval): fixed, or grown with the data.

A recipe that suits FOLDOC's 8k inputs under-trains larger sets (21k inputs: 93.38 against 91.52 P@1, issue 38).
`auto` is a rule of the number of training inputs N (docs/pipeline.md):

    global batch B = 2^round(log2(N / 80)), clipped to [32, 512]
    lr             = 1e-4 x min(sqrt(B / 32), 2)
    max_steps      = 12 N / B, rounded to hundreds, clipped to [300, 20,000]
    warmup_steps   = max_steps / 10, rounded
    hnm_steps      = max_steps / 3, rounded up

A key given as a number is used as written, and what the rule derives from it follows it: a preset runs as printed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

KEYS = ("batch_size", "lr", "max_steps", "warmup_steps", "hnm_steps")  # the train.* keys that may say auto

INPUTS_PER_BATCH = 80       # the batch grows as N / 80: 21k inputs, batch 256
BATCH_RANGE = (32, 512)
EPOCHS = 12                 # 1,000 steps of 256 over 21k inputs
STEPS_RANGE = (300, 20_000)
LR_GROWTH_CAP = 2.0         # sqrt(256 / 32) would give 2.8e-4; 2e-4 was measured, the paper ran 2-3e-4 at 3-7k
WARMUP_SHARE = 0.1
MINING_ROUNDS = 3


@dataclass(frozen=True)
class Schedule:
    """The resolved values: `batch_size` per process, as train.batch_size is."""
    batch_size: int
    lr: float
    max_steps: int
    warmup_steps: int
    hnm_steps: int


FIXED = Schedule(batch_size=32, lr=1.0e-4, max_steps=300, warmup_steps=30, hnm_steps=100)  # a short CPU recipe


def resolve(mode: str, n_train: int, world_size: int, chosen: dict[str, int | float]) -> Schedule:
    """The schedule of `mode` for `n_train` inputs on `world_size` processes; `chosen` keys (numbers) win,
    the others come from FIXED or the rule, each from the values before it."""
    if mode == "fixed":
        return Schedule(**{key: chosen.get(key, getattr(FIXED, key)) for key in KEYS})
    # the power of two nearest N / 80 (in log scale)
    auto_batch = int(np.clip(2 ** round(math.log2(max(n_train, 1) / INPUTS_PER_BATCH)), *BATCH_RANGE))
    per_process = chosen.get("batch_size", math.ceil(auto_batch / world_size))
    global_batch = per_process * world_size
    steps = chosen.get("max_steps", int(np.clip(100 * round(EPOCHS * n_train / global_batch / 100), *STEPS_RANGE)))
    lr = chosen.get("lr", FIXED.lr * min(math.sqrt(global_batch / FIXED.batch_size), LR_GROWTH_CAP))
    return Schedule(batch_size=per_process, lr=lr, max_steps=steps,
                    warmup_steps=chosen.get("warmup_steps", round(steps * WARMUP_SHARE)),
                    hnm_steps=chosen.get("hnm_steps", math.ceil(steps / MINING_ROUNDS)))


def describe(mode: str, n_train: int, world_size: int, schedule: Schedule, grad_cache_chunk: int) -> str:
    """The one line the train stage prints."""
    caching = f"gradient caching {grad_cache_chunk} texts a pass" if grad_cache_chunk else "no gradient caching"
    return (f"train schedule ({mode}, N={n_train:,} training inputs): global batch {schedule.batch_size * world_size}"
            f" ({schedule.batch_size} x {world_size} process(es)), lr {schedule.lr:.3g}, {schedule.max_steps} steps, "
            f"warm-up {schedule.warmup_steps}, mining every {schedule.hnm_steps} steps, {caching}")
