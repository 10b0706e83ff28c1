"""The tune stage's settings: the `infer` keys that say which of λ, τ and the label share are chosen on held-out
training inputs (auto) and on what grid, how many inputs are held out and in how many folds, all checked first."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..data.held_out import tune_split
from ..errors import PARAMS_FILE, ConfigError
from ..memory.merge import DEFAULT_LABEL_SHARE, JOINT, SPLIT
from ..rae.scoring import PAPER_LAMBDA, PAPER_TAU
from ..settings import AUTO, Settings

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
    retrieval: str | None = JOINT   # None: auto (joint or split, chosen)
    label_share: float | None = DEFAULT_LABEL_SHARE   # split only; None: auto
    label_share_grid: tuple[float, ...] = ()

    @classmethod
    def from_settings(cls, settings: Settings) -> TuneSettings:
        """The choice's settings, from the checked params (the held-out split: data.held_out.tune_split)."""
        infer, split = settings.infer, tune_split(settings)
        return cls(lam=_or_none(infer.lam), tau=_or_none(infer.tau), lambda_grid=infer.lambda_sweep,
                   tau_grid=infer.tau_grid, metric=infer.auto_metric, b=infer.b, val_fraction=split.fraction,
                   val_max_queries=infer.val_max_queries, val_seed=split.seed, fraction_key=split.fraction_key,
                   relevance=infer.relevance, val_folds=_or_none(infer.val_folds),
                   encoder_trained=settings.encoder.mode == "fine-tuned", retrieval=_or_none(infer.retrieval),
                   label_share=_or_none(infer.label_share), label_share_grid=infer.label_share_grid)

    def folds_for(self, num_inputs: int) -> int:
        """`val_folds`, or where auto, enough that the held-out inputs reach VAL_MIN_QUERIES, at most 1 / val_fraction
        (and as many as are disjoint); one for a fine-tuned encoder: training held out only the first fold."""
        per_fold = int(round(num_inputs * self.val_fraction))
        if per_fold == 0:
            return 1  # nothing held out: held_out_labels says so, naming fraction_key
        most = min(num_inputs // per_fold, int(1 / self.val_fraction))
        if self.val_folds is None:
            return 1 if self.encoder_trained else min(most, math.ceil(VAL_MIN_QUERIES / per_fold))
        if self.val_folds > most:
            raise ConfigError(f"infer.val_folds {self.val_folds}: at most {most} disjoint folds of {self.fraction_key} "
                              f"{self.val_fraction} fit {num_inputs} training inputs", PARAMS_FILE, "infer.val_folds")
        return self.val_folds

    @property
    def fixed_lambda(self) -> float:
        """The hand-set λ (the paper's when auto): what the choice is compared with; likewise τ."""
        return PAPER_LAMBDA if self.lam is None else self.lam

    @property
    def fixed_tau(self) -> float:
        return PAPER_TAU if self.tau is None else self.tau

    def lambdas(self) -> list[float]:
        """The λ of the validation curve: the grid and the fixed value; likewise τ."""
        return sorted({*self.lambda_grid, self.fixed_lambda})

    def taus(self) -> list[float]:
        return sorted({*self.tau_grid, self.fixed_tau})

    @property
    def retrievals(self) -> tuple[str, ...]:
        return (JOINT, SPLIT) if self.retrieval is None else (self.retrieval,)

    @property
    def split_share(self) -> float:
        """A split retrieval's hand-set label share, 0.5 where auto: the first round's."""
        return DEFAULT_LABEL_SHARE if self.label_share is None else self.label_share

    @property
    def fixed_share(self) -> float | None:
        """The hand-set point's label share: None (joint, the paper's) unless the retrieval is split."""
        return self.split_share if self.retrieval == SPLIT else None

    def shares(self) -> list[float]:
        """A split retrieval's second round: the grid and the first round's share."""
        return sorted({*self.label_share_grid, self.split_share})

    @property
    def chooses_share(self) -> bool:
        return self.retrieval != JOINT and self.label_share is None


def _or_none(setting: Any) -> Any:
    return None if setting == AUTO else setting
