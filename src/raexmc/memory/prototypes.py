"""Label keys unit(z_l + α · unit(mean key of l's inputs)): a smaller memory drops input keys, and a prototype keeps
what they said about their labels at no extra bytes (at keep 1 they only pull label keys off, so auto skips them).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..errors import PARAMS_FILE, ConfigError
from ..settings import AUTO
from .key_selection import unit_rows
from .search import EXACT_MAX_KEYS

LABEL_BLOCK = 65_536  # labels whose input sums one sparse product makes (the largest scratch: a block x d)


def searches_prototypes(setting: object, keep: float, backend: str) -> bool:
    """Whether the tune stage chooses α: prototypes auto, keep < 1 and a backend that builds graphs."""
    return setting == AUTO and keep < 1.0 and backend != "exact"


def prototype_weight(setting: float | str, keep: float, backend: str, chosen: float | None = None) -> float:
    """α from `memory.prototypes`: the number, or for auto `chosen` where searches_prototypes (else 0)."""
    if setting == AUTO:
        if not searches_prototypes(setting, keep, backend):
            return 0.0
        if chosen is None:
            raise ConfigError("memory.prototypes auto below keep 1 is chosen by the tune stage: the memory stage "
                              "needs its choice file", PARAMS_FILE, "memory.prototypes")
        return float(chosen)
    weight = float(setting)
    if weight > 0 and backend == "exact":
        raise ConfigError(f"label prototypes need an index backend that builds graphs (hnsw; index.backend auto is "
                          f"exact up to {EXACT_MAX_KEYS:,} keys): the exact backend keeps no label index of a memory's "
                          "own", PARAMS_FILE, "memory.prototypes")
    return weight


def label_prototypes(inputs: np.ndarray, values: sp.csr_matrix, labels: np.ndarray, weight: float,
                     rows: np.ndarray | None = None) -> np.ndarray:
    """The (L, d) unit prototype keys; with `rows`, `values` belong to those rows of `inputs` (no copy of them)."""
    rows = np.arange(len(inputs)) if rows is None else np.asarray(rows)
    if values.shape != (len(rows), len(labels)):
        raise ValueError(f"value rows of shape {values.shape} for {len(rows)} inputs and {len(labels)} labels")
    by_label = sp.csr_matrix((values != 0).astype(np.float32).T)  # (L, len(rows)): 1 where input j has label l
    # the same with each column at its input's row of `inputs`: (L, N)
    inputs_of_label = sp.csr_matrix((by_label.data, rows[by_label.indices], by_label.indptr),
                                    shape=(len(labels), len(inputs)))
    prototypes = np.empty((len(labels), labels.shape[1]), dtype=np.float32)
    for start in range(0, len(labels), LABEL_BLOCK):
        block = slice(start, start + LABEL_BLOCK)
        means = unit_rows(np.asarray(inputs_of_label[block] @ inputs, dtype=np.float32))
        prototypes[block] = unit_rows(np.asarray(labels[block], dtype=np.float32) + weight * means)
    return prototypes

