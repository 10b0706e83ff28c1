"""Label keys that carry the training inputs: in RAE's memory the key of label l becomes
unit(z_l + α · unit(x̄_l)), where z_l is the label text's key and x̄_l the mean key of the training inputs
labelled l (a label no input has keeps z_l).

Why: a smaller memory (memory.keep < 1) drops most input keys, and with them what those inputs say about
their labels. A prototype puts that into the label's own key, at no extra bytes: a query near the inputs of
label l now also finds l's key, where the full memory would have found those inputs. With every input kept
the inputs speak for themselves and the prototypes only pull the label keys away from the label texts, so
`auto` uses them for a smaller memory alone, with the α that the tune stage chooses from
`memory.prototypes_grid` on held-out training inputs (evaluation/prototype_selection.py). The dual encoder,
the label texts' baseline, keeps z_l.
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
    """Whether the tune stage chooses α: `memory.prototypes` auto, where keep < 1 and the index backend builds
    graphs (the exact backend, which auto picks for small data, keeps no label index of a memory's own)."""
    return setting == AUTO and keep < 1.0 and backend != "exact"


def prototype_weight(setting: float | str, keep: float, backend: str, chosen: float | None = None) -> float:
    """α from `memory.prototypes`: a number >= 0 (0: the label texts' keys), or auto: `chosen` (a point of
    memory.prototypes_grid, or the tune stage's choice) where searches_prototypes, else 0. `chosen` is read
    only there. `setting` is as the settings loader checked it."""
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
    """The (L, d) unit prototype keys: unit(z_l + weight · unit(sum of the keys of the inputs labelled l)).
    `values` are the inputs' value rows (only which labels each has counts); with `rows` they belong to
    those rows of `inputs`, so that a subset (the tune stage's memory inputs) needs no copy of its keys."""
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

