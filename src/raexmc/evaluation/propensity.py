"""Label propensities (Jain et al. 2016) for PSP@k. The (A, B) were fitted per dataset, so they come from a table by
exact name, never from a word in it: "Wiki" is in Wiki10-31K, which takes the default pair."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

# The three pairs in use (pyxclib's xclib/evaluation/xc_metrics.py, compute_inv_propesity's docstring:
# "0.5/0.4: Wikipedia, 0.6/2.6: Amazon, 0.55/1.5: otherwise").
DEFAULT_AB = (0.55, 1.5)
AMAZON_AB = (0.6, 2.6)
WIKIPEDIA_AB = (0.5, 0.4)

# The Extreme Classification Repository's datasets, each with the pair its reference code uses there.
# Sources: [deepxml] Extreme-classification/deepxml, deepxml/data_stats.json; [DECAF] Extreme-classification/
# DECAF, DECAF/configs/dataset_stats/<name>.sh; [ECLARE] Extreme-classification/ECLARE,
# ECLARE/configs/ECLARE/<name>.json; [napkinXC] mwydmuch/napkinXC, experiments/calculate_Jain_et_al_inv_ps.py
# (0.5/0.4 for wikiLSHTC and WikipediaLarge-500K, 0.6/2.6 for amazon and amazon-3M, 0.55/1.5 for the rest);
# [pyxclib#7] kunaldahiya/pyxclib issue 7, the maintainers' answer: Amazon-670K and Amazon-3M take the Amazon
# pair, "For AmazonCat-13K use 0.55 and 1.5".
PROPENSITY_AB: dict[str, tuple[float, float]] = {
    "EURLex-4K": DEFAULT_AB,                  # deepxml; napkinXC
    "AmazonCat-13K": DEFAULT_AB,              # pyxclib#7; deepxml; napkinXC
    "Wiki10-31K": DEFAULT_AB,                 # napkinXC (tags of Wikipedia pages, not Wikipedia's categories)
    "WikiLSHTC-325K": WIKIPEDIA_AB,           # napkinXC
    "Wikipedia-500K": WIKIPEDIA_AB,           # deepxml; napkinXC
    "Amazon-670K": AMAZON_AB,                 # deepxml; napkinXC; pyxclib#7
    "Amazon-3M": AMAZON_AB,                   # napkinXC; pyxclib#7
    "LF-Amazon-131K": AMAZON_AB,              # DECAF
    "LF-AmazonTitles-131K": AMAZON_AB,        # ECLARE
    "LF-AmazonTitles-1.3M": AMAZON_AB,        # ECLARE; DECAF (LF-Amazon-1.3M.sh)
    "LF-WikiSeeAlso-320K": DEFAULT_AB,        # DECAF
    "LF-WikiSeeAlsoTitles-320K": DEFAULT_AB,  # ECLARE
    "LF-Wikipedia-500K": WIKIPEDIA_AB,        # DECAF
    "LF-WikiTitles-500K": WIKIPEDIA_AB,       # ECLARE
}
_BY_LOWER_NAME = {name.lower(): name for name in PROPENSITY_AB}


@dataclass(frozen=True)
class Propensity:
    """The propensity model's (A, B) and where they came from: what the evaluate stage reports beside PSP@k."""

    A: float
    B: float
    source: str       # for the records: "table: LF-AmazonTitles-131K", "default" or "evaluate.propensity"
    explanation: str  # in a sentence, for the stage's output

    @property
    def ab(self) -> tuple[float, float]:
        return self.A, self.B

    def line(self) -> str:
        return f"PSP@k: A={self.A:g}, B={self.B:g} ({self.explanation})"

    def record(self) -> dict[str, float | str]:
        return {"A": self.A, "B": self.B, "source": self.source}


def propensities(train_label_freq: np.ndarray, num_train: int, A: float = DEFAULT_AB[0],
                  B: float = DEFAULT_AB[1]) -> np.ndarray:
    """Jain et al. (2016) propensities p_l = 1 / (1 + C (N_l + B)^-A), C = (ln N - 1)(B + 1)^A."""
    freq = np.asarray(train_label_freq, dtype=np.float64)
    c = (np.log(num_train) - 1.0) * (B + 1.0) ** A
    return 1.0 / (1.0 + c * np.exp(-A * np.log(freq + B)))


def table_propensity(names: Sequence[str]) -> Propensity:
    """(A, B) of the first of `names` (a dataset's names, e.g. `Dataset.names`) that the table holds, matched
    whole with letter case aside; the default pair when it holds none of them."""
    for name in names:
        known = _BY_LOWER_NAME.get(name.lower())
        if known is not None:
            return Propensity(*PROPENSITY_AB[known], f"table: {known}", f"{known} in the propensity table")
    shown = " or ".join(f"'{name}'" for name in dict.fromkeys(names))
    return Propensity(*DEFAULT_AB, "default", f"the default: {shown} is not in the propensity table; "
                                              "set evaluate.propensity: [A, B] to choose")


def chosen_propensity(setting: str | tuple[float, ...], names: Sequence[str]) -> Propensity:
    """`evaluate.propensity`: "auto" looks the dataset's `names` up in the table; else the [A, B] it gives."""
    if setting == "auto":
        return table_propensity(names)
    return Propensity(*setting, "evaluate.propensity", "evaluate.propensity")
