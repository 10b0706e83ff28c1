"""Label keys that carry the training inputs: in RAE's memory the key of label l becomes
unit(z_l + α · unit(x̄_l)), where z_l is the label text's key and x̄_l the mean key of the training inputs
labelled l (a label no input has keeps z_l).

Why: a smaller memory (memory.keep < 1) drops most input keys, and with them what those inputs say about
their labels. A prototype puts that into the label's own key, at no extra bytes: a query near the inputs of
label l now also finds l's key, where the full memory would have found those inputs. With every input kept
the inputs speak for themselves and the prototypes only pull the label keys away from the label texts, so
`auto` uses them for a smaller memory alone. The dual encoder, the label texts' baseline, keeps z_l.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from ..errors import PARAMS_FILE, ConfigError
from .key_selection import unit_rows
from .search import EXACT_MAX_KEYS

AUTO_WEIGHT = 0.5    # α of `auto` where keep < 1: the first value tried on FOLDOC (docs/memory.md: the table's rows)
LABEL_BLOCK = 65_536  # labels whose input sums one sparse product makes (the largest scratch: a block x d)


def prototype_weight(setting: object, keep: float, backend: str, path: str = PARAMS_FILE) -> float:
    """α from `memory.prototypes`: a number >= 0 (0: the label texts' keys), or auto: AUTO_WEIGHT where keep < 1
    and the index backend builds graphs (the exact backend, which auto picks for small data, keeps no label index of
    a memory's own), else 0."""
    if setting == "auto":
        return AUTO_WEIGHT if keep < 1.0 and backend != "exact" else 0.0
    if isinstance(setting, bool) or not isinstance(setting, (int, float)) or not math.isfinite(setting) or setting < 0:
        raise ConfigError(f"memory.prototypes must be auto or a number >= 0, got {setting!r}", path,
                          "memory.prototypes")
    if setting > 0 and backend == "exact":
        raise ConfigError(f"label prototypes need an index backend that builds graphs (hnsw; index.backend auto is "
                          f"exact up to {EXACT_MAX_KEYS:,} keys): the exact backend keeps no label index of a memory's "
                          "own", path, "memory.prototypes")
    return float(setting)


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

