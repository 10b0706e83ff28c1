"""The training recipe (the `train` section of params.yaml), every value checked for type and range before any work."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ..encoder.device import DEVICE_PATTERN, PRECISIONS, is_embed_batch_setting
from ..errors import ConfigError
from ..params import Params
from .schedule import KEYS as SCHEDULE_KEYS
from .schedule import MODES as SCHEDULE_MODES
from .schedule import Schedule, resolve


@dataclass(frozen=True)
class Rule:
    """What one `train.*` value must be: its type(s), and its range in words and as a test."""
    kind: type | tuple[type, ...]
    text: str
    ok: Callable[[Any], bool] = lambda value: True


def _setting(kind: type, text: str, ok: Callable[[Any], bool] = lambda value: True) -> Any:
    """A TrainSettings field and its rule; no default, since params.yaml is where defaults live."""
    return field(metadata={"rule": Rule(kind, text, ok)})


def _at_least(low: int) -> Any:
    return _setting(int, f"an integer >= {low}", lambda value: value >= low)


def _positive() -> Any:
    return _setting(float, "a finite number > 0", lambda value: 0 < value < math.inf)


def _fraction() -> Any:
    return _setting(float, "a number in [0, 1]", lambda value: 0 <= value <= 1)


def _switch() -> Any:
    return _setting(bool, "true or false")


# Keys of the `train` section that start processes rather than shape the recipe: the stage reads
# them, and they stay out of TrainSettings (so out of the checkpoint's fingerprint).
LAUNCH_RULES = {
    "nproc": Rule((str, int), "'auto' or an integer >= 1",
                  lambda value: value == "auto" or (isinstance(value, int) and value >= 1)),
    "torchrun_args": Rule(str, "a string of torchrun arguments"),
    "device": Rule(str, "auto, cpu, cuda or cuda:N", lambda value: re.fullmatch(DEVICE_PATTERN, value)),
    "precision": Rule(str, f"one of {', '.join(PRECISIONS)}", lambda value: value in PRECISIONS),
}


SCHEDULE_RULE = Rule(str, f"one of {', '.join(SCHEDULE_MODES)}", lambda value: value in SCHEDULE_MODES)


def _or_auto(rule: Rule) -> Rule:
    """A schedule key's rule: its own, or `auto` (which the schedule resolves)."""
    kinds = rule.kind if isinstance(rule.kind, tuple) else (rule.kind,)
    return Rule((str, *kinds), f"auto or {rule.text}",
                lambda value: value == "auto" if isinstance(value, str) else rule.ok(value))


@dataclass(frozen=True)
class TrainSettings:
    """The training recipe: the `train` section of params.yaml less its launch keys.

    No defaults here: params.yaml is where they live, except what its schedule keys' `auto` stands
    for (the fixed recipe, or the rule of N), which training/schedule.py holds; these fields hold
    the resolved numbers. The pipeline builds this with `from_params`, which checks every value
    before any work; tests and benchmarks start from that and `dataclasses.replace` what they vary.
    """
    batch_size: int = _at_least(1)           # inputs per device; the global batch is this times the world size
    grad_cache_chunk: int | str = _setting(  # texts per encoder pass with gradient caching; 0 = off; auto: by memory
        (str, int), "auto or an integer >= 0",
        lambda value: value == "auto" if isinstance(value, str) else value >= 0)
    lr: float = _positive()
    max_steps: int = _at_least(1)
    warmup_steps: int = _at_least(0)
    weight_decay: float = _setting(float, "a number >= 0", lambda value: value >= 0)
    grad_clip: float = _setting(float, "a number > 0 (.inf: no clipping)", lambda value: value > 0)
    tau: float = _positive()
    hnm_steps: int = _at_least(1)
    hnm_topk: int = _at_least(1)
    num_hard_negatives: int = _at_least(0)
    hard_negatives: bool = _switch()
    instance_negatives: bool = _switch()
    val_fraction: float = _setting(float, "a number in [0, 1)", lambda value: 0 <= value < 1)
    val_b: int = _at_least(1)
    val_max_queries: int = _at_least(0)      # held-out inputs that query at a validation (a seeded subset; 0: none)
    val_lambda: float = _fraction()
    validate_last: bool = _switch()          # a round after the last step only to validate the final encoder
    checkpoint_every: int = _at_least(1)
    embed_batch_size: int | str = _setting((str, int), "auto or an integer >= 1",
                                           is_embed_batch_setting)  # texts per re-embedding call
    seed: int = _at_least(0)

    @property
    def mines_negatives(self) -> bool:
        """Whether mining rounds mine hard negatives (they may still validate)."""
        return self.hard_negatives and self.num_hard_negatives > 0

    @property
    def validates(self) -> bool:
        """Whether mining rounds validate: a split held out (which the tune stage validates on either way) and
        queries drawn from it."""
        return self.val_fraction > 0 and self.val_max_queries > 0

    @property
    def schedule(self) -> Schedule:
        """The resolved schedule keys (batch_size per process)."""
        return Schedule(**{key: getattr(self, key) for key in SCHEDULE_KEYS})

    @classmethod
    def from_params(cls, p: Params, n_train: Callable[[], int], world_size: int = 1) -> TrainSettings:
        """The recipe of params.yaml's `train` section on `world_size` processes. Every key there, launch keys
        included, is checked for type and range; an unknown key is an error, not silently dropped. Schedule
        keys that say auto are resolved by `train.schedule`; `n_train()` (the number of training inputs) is
        asked for only by `auto`, and only once every value passed, so a bad value is reported before any data
        is read."""
        rules = {**LAUNCH_RULES, "schedule": SCHEDULE_RULE}
        for f in fields(cls):
            rule = f.metadata["rule"]
            rules[f.name] = _or_auto(rule) if f.name in SCHEDULE_KEYS else rule
        for key in p.section("train"):
            if key not in rules:
                raise ConfigError(f"unknown parameter (the train section knows {', '.join(rules)})", p.path,
                                  f"train.{key}")
        values = {}
        for key, rule in rules.items():
            value = p.typed(f"train.{key}", rule.kind)  # missing, or the wrong type: ConfigError
            if not rule.ok(value):
                raise ConfigError(f"must be {rule.text}, got {value!r}", p.path, f"train.{key}")
            values[key] = value
        mode = values["schedule"]
        chosen = {key: values[key] for key in SCHEDULE_KEYS if values[key] != "auto"}
        resolved = resolve(mode, n_train() if mode == "auto" else 0, world_size, chosen)
        return cls(**{**{f.name: values[f.name] for f in fields(cls)}, **asdict(resolved)})
