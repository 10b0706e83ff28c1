"""Validation during training: P@1 of RAE, the dual encoder and kNN on held-out training inputs."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from ..evaluation.evaluator import Evaluator
from ..evaluation.methods import method_scorers
from ..evaluation.retrievals import Retrievals
from ..memory.keys_values import training_values
from ..memory.torch_index import top_k_search
from .settings import TrainSettings


def validate(inputs: np.ndarray, labels: np.ndarray, Y: sp.csr_matrix, filters: sp.csr_matrix,
             train_rows: np.ndarray, val_rows: np.ndarray, settings: TrainSettings, device: str,
             propensity_ab: tuple[float, float]) -> dict[str, float]:
    """Validation P@1 of RAE, the dual encoder and kNN (each its own exact search), and the inputs queried."""
    queries, memory_inputs = inputs[val_rows], inputs[train_rows]
    searches = {"joint": np.vstack([memory_inputs, labels]), "labels": labels, "inputs": memory_inputs}
    retrievals = Retrievals(**{name: top_k_search(keys, device)(queries, settings.val_b)
                               for name, keys in searches.items()})
    values = training_values(Y[train_rows], copy=False)
    evaluator = Evaluator(values, Y[val_rows], filters[val_rows], propensity_ab)
    scorers = method_scorers(retrievals, values, settings.val_lambda, settings.tau, settings.val_b)
    return {"val_queries": len(val_rows),
            **{f"val_{name}_P@1": evaluator.summary(evaluator.rank(len(val_rows), scorer))[0]["P@1"]
               for name, scorer in scorers.items()}}
