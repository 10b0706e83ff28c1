"""Choosing the memory's share of training-input keys on held-out training inputs (`memory.keep: auto`), never on
the test set.

A smaller memory can beat the full one (merged keys vote together; an input that misleads its neighbours may
be dropped), and where it does moves with the data and the encoder. So the tune stage measures each share of
`memory.keep_grid` as it measures λ and τ: for each keep, the memory is selected from the training inputs that
are not held out, as the memory stage selects it from all (validation_memory.validation_retrieval), and λ and τ (and a
split retrieval's automatic label share, and the label prototypes' α where `memory.prototypes` is auto) are
chosen afresh on it (prototype_selection.MemoryTuning), so that each share is judged at its own best, not at
another memory's. The keep with the best value of `infer.auto_metric` wins; among equal values (metrics are
rounded to 0.01 points) the larger keep, the nearer the paper's full memory. A choice cannot fall off the grid:
where the smallest keep tried wins, its half is tried too (where the largest below 1 wins, its double, at most
1), at most WIDEN_STEPS points past each edge, as λ and τ widen (point_choice.choose_point).

The cost is one tune stage per keep tried: a key selection (k-means for the kmeans methods), one exact search
of the held-out inputs over the kept keys, and one λ × τ curve (one per α where α is chosen too), each smaller
keep searching fewer keys; the labels' search is the same at every keep, and made once per α.
"""

from __future__ import annotations

from collections.abc import Callable

from .point_choice import Tuned, choose_point
from .selection import past_edge
from .selection_file import Selection
from .validation_memory import ValidationRetrieval


def choose_keep(tune_at: Callable[[float], Tuned], grid: tuple[float, ...],
                metric: str) -> tuple[ValidationRetrieval, Selection]:
    """The validation retrieval of the chosen keep and its selection, with the keep, `auto.keep` and the keep
    curve (point_choice.chosen_row per keep tried, largest first) added. `tune_at` judges the memory at a keep."""
    def widen(tried: list[float], chosen: float, original: list[float]) -> list[float]:
        # keep, like τ, is a scale: widened by halving (or doubling, up to the full memory)
        return sorted({min(1.0, k) for k in past_edge("tau", tried, chosen, original)})

    keep, retrieval, selection, curve = choose_point("keep", grid, tune_at, metric, ties_to_larger=True,
                                                     widen=widen)
    return retrieval, selection.with_(keep=keep, auto={**selection.auto, "keep": True}, keep_curve=curve[::-1])
