"""The tune stage's settings: the `infer` keys that say which of λ, τ and the label share are chosen on held-out
training inputs (auto) and on what grid, how many inputs are held out and in how many folds, all checked first."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..checks import one_of, positive_int
from ..data.held_out import tune_split
from ..errors import PARAMS_FILE, ConfigError
from ..memory.merge import DEFAULT_LABEL_SHARE, JOINT, RETRIEVALS, SPLIT, check_label_share
from ..params import Params
from ..rae.scoring import PAPER_LAMBDA, PAPER_TAU, check_b, check_lambda, check_tau
from .methods import HEADLINE

AUTO = "auto"
# Held-out queries that `infer.val_folds: auto` pools folds up to: P@1's standard error near 75% is about one
# point at 2,000 queries, against two at FOLDOC's 411, and a choice between neighbouring grid points rests on
# a few dozen queries, not a handful.
VAL_MIN_QUERIES = 2000


@dataclass(frozen=True)
class TuneSettings:
    """The `infer` keys the choice reads; `lam` or `tau` None means "auto" (chosen on validation)."""

    lam: float | None
    tau: float | None
    lambda_grid: tuple[float, ...]
    tau_grid: tuple[float, ...]
    metric: str
    b: int
    val_fraction: float
    val_max_queries: int
    val_seed: int
    relevance: str
    fraction_key: str = "infer.val_fraction"   # where val_fraction came from (data.held_out.tune_split), for errors
    val_folds: int | None = 1   # None: auto (folds_for)
    encoder_trained: bool = False   # the embeddings' encoder was fine-tuned on the inputs outside the first fold
    retrieval: str = JOINT
    label_share: float | None = DEFAULT_LABEL_SHARE   # split only; None: auto
    label_share_grid: tuple[float, ...] = ()

    @classmethod
    def from_params(cls, p: Params) -> TuneSettings:
        """Every value checked before any work, each failure one ConfigError naming its key."""
        fraction = p.typed("infer.val_fraction", float)
        if not 0.0 < fraction < 1.0:
            raise ConfigError(f"infer.val_fraction must be in (0, 1), got {fraction!r}", p.path, "infer.val_fraction")
        # both checked in either mode: a fine-tuned encoder validates on training's split
        p.integer("infer.val_seed", 0)
        split = tune_split(p)
        metric = p.typed("infer.auto_metric", str)
        if metric not in HEADLINE:
            raise ConfigError(f"infer.auto_metric must be one of {', '.join(HEADLINE)}, got {metric!r}",
                              p.path, "infer.auto_metric")
        return cls(lam=_number_or_auto(p, "infer.lambda", check_lambda, "a number in [0, 1]"),
                   tau=_number_or_auto(p, "infer.tau", check_tau, "a number > 0"),
                   lambda_grid=p.grid("infer.lambda_sweep", check_lambda, "numbers in [0, 1]"),
                   tau_grid=p.grid("infer.tau_grid", check_tau, "numbers > 0"),
                   metric=metric, b=check_b(p.typed("infer.b", int)), val_fraction=split.fraction,
                   val_max_queries=positive_int(p.get("infer.val_max_queries"), "infer.val_max_queries", p.path,
                                                "infer.val_max_queries"),
                   val_seed=split.seed, fraction_key=split.fraction_key, relevance=p.typed("infer.relevance", str),
                   val_folds=_folds_or_auto(p), encoder_trained=p.get("encoder.mode") == "fine-tuned",
                   retrieval=one_of(p.get("infer.retrieval"), RETRIEVALS, "infer.retrieval", p.path, "infer.retrieval"),
                   label_share=_number_or_auto(p, "infer.label_share", check_label_share, "a number in [0, 1]"),
                   label_share_grid=p.grid("infer.label_share_grid", check_label_share, "numbers in [0, 1]"))

    def folds_for(self, num_inputs: int) -> int:
        """The validation folds of `num_inputs` training inputs: `val_folds`, or where auto, enough that the
        held-out inputs reach VAL_MIN_QUERIES, at most 1 / val_fraction (and as many as are disjoint). One for a
        fine-tuned encoder: training held out only the first fold, so any other would validate on inputs the
        encoder was trained on."""
        per_fold = int(round(num_inputs * self.val_fraction))
        if per_fold == 0:
            return 1  # nothing held out: held_out_labels says so, naming fraction_key
        most = min(num_inputs // per_fold, int(1 / self.val_fraction))
        if self.val_folds is None:
            return 1 if self.encoder_trained else min(most, math.ceil(VAL_MIN_QUERIES / per_fold))
        if self.val_folds > 1 and self.encoder_trained:
            raise ConfigError(f"infer.val_folds {self.val_folds} with encoder.mode fine-tuned: the encoder was trained "
                              "on every input outside the first fold, so the others would validate on training "
                              "inputs; use 1 or auto", PARAMS_FILE, "infer.val_folds")
        if self.val_folds > most:
            raise ConfigError(f"infer.val_folds {self.val_folds}: at most {most} disjoint folds of {self.fraction_key} "
                              f"{self.val_fraction} fit {num_inputs} training inputs", PARAMS_FILE, "infer.val_folds")
        return self.val_folds

    @property
    def fixed_lambda(self) -> float:
        """The hand-set λ (the paper's when λ is auto): what the choice is compared with."""
        return PAPER_LAMBDA if self.lam is None else self.lam

    @property
    def fixed_tau(self) -> float:
        return PAPER_TAU if self.tau is None else self.tau

    def lambdas(self) -> list[float]:
        """The λ of the validation curve: the grid and the fixed value."""
        return sorted({*self.lambda_grid, self.fixed_lambda})

    def taus(self) -> list[float]:
        return sorted({*self.tau_grid, self.fixed_tau})

    @property
    def fixed_share(self) -> float | None:
        """The hand-set label share (0.5 when auto; None for the joint retrieval, which has none)."""
        if self.retrieval == JOINT:
            return None
        return DEFAULT_LABEL_SHARE if self.label_share is None else self.label_share

    def shares(self) -> list[float | None]:
        """The label shares of the curve's second round: the grid and the fixed value (None: joint)."""
        if self.retrieval == JOINT:
            return [None]
        return sorted({*self.label_share_grid, self.fixed_share})

    @property
    def chooses_share(self) -> bool:
        return self.retrieval == SPLIT and self.label_share is None


def _folds_or_auto(p: Params) -> int | None:
    value = p.get("infer.val_folds", 1)
    if value == AUTO:
        return None
    try:
        return positive_int(value, "infer.val_folds", p.path, "infer.val_folds")
    except ConfigError:
        raise ConfigError(f"infer.val_folds must be an integer >= 1 or {AUTO}, got {value!r}", p.path,
                          "infer.val_folds") from None


def _number_or_auto(p: Params, key: str, check: Callable[[Any], float], text: str) -> float | None:
    value = p.get(key)
    return None if value == AUTO else p.checked(key, [value], check, f"{text} or {AUTO}", value)[0]
