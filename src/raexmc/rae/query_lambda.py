"""A λ per query: a small model that reads a query's joint retrieval and picks its λ from a grid, by one ridge
regression per grid point of the query's target metric on standardised retrieval features. Fitted on validation
queries (evaluation/query_lambda_fit.py), it is kept only when it beats the best fixed λ by MARGIN_SE standard
errors, else it is that λ (docs/pipeline.md, the tune stage: what it gains where); it travels as a small JSON dict.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..errors import DataError
from ..io import read_json
from .scoring import Parts, check_b, check_tau, kept_mask, key_probabilities, score_parts

# Features of one query's joint retrieval over its first b valid keys, in this column order.
FEATURES = (
    "input_share",            # share of the kept keys that are training inputs (the rest are labels)
    "best_input_sim",         # similarity of the best input key (none kept: the lowest kept similarity, a bound)
    "best_label_sim",         # similarity of the best label key (none kept: the lowest kept similarity, a bound)
    "sim_gap",                # best_input_sim - best_label_sim: which kind of key the query is nearest to
    "entropy",                # entropy (nats) of the softmax over the kept keys at tau: how peaked the retrieval is
    "input_mass",             # softmax mass on input keys: the share of the scores that lambda weighs
    "inputs_back_label_top",  # the input keys' score of the label keys' best label, over their own best score
    "labels_back_input_top",  # the label keys' score of the input keys' best label, over their own best score
)
DEFAULT_FOLDS = 5
DEFAULT_RIDGE = 1.0
MARGIN_SE = 2.0  # the model's cross-validated gain must exceed this many standard errors
QUERY_LAMBDA_FILE = "query_lambda.json"  # the tune stage writes it, the package stage copies it into the memory


def query_features(ids: np.ndarray, sims: np.ndarray, Y_train: sp.spmatrix, tau: float,
                   b: int | None = None, parts: Parts | None = None) -> np.ndarray:
    """(n, len(FEATURES)) float64 features of n joint retrievals; a query without a valid key gets zeros.
    `parts`: the score halves at (tau, b) where the caller has them (RaeModel does)."""
    num_train, num_labels = Y_train.shape
    probs = key_probabilities(sims, ids, tau, num_train + num_labels, b)  # validates ids, sims, tau, b
    knn_part, label_part = score_parts(ids, sims, Y_train, tau, b) if parts is None else parts
    ids, sims = np.asarray(ids, dtype=np.int64), np.asarray(sims, dtype=np.float64)
    kept = kept_mask(ids, sims, b)
    is_input = kept & (ids < num_train)
    count = kept.sum(axis=1)
    lowest = np.where(kept, sims, np.inf).min(axis=1, initial=np.inf)
    lowest[count == 0] = 0.0

    def best(mask: np.ndarray) -> np.ndarray:
        top = np.where(mask, sims, -np.inf).max(axis=1, initial=-np.inf)
        return np.where(mask.any(axis=1), top, lowest)

    best_input, best_label = best(is_input), best(kept & ~is_input)
    plogp = probs.copy()
    positive = plogp.data > 0
    plogp.data[positive] *= np.log(plogp.data[positive])
    entropy = -np.asarray(plogp.sum(axis=1)).ravel()
    input_mass = np.asarray(probs[:, :num_train].sum(axis=1)).ravel()
    share = np.divide(is_input.sum(axis=1), count, out=np.zeros(len(count)), where=count > 0)
    return np.column_stack([share, best_input, best_label, best_input - best_label, entropy, input_mass,
                            _backing(knn_part, label_part), _backing(label_part, knn_part)])


def _backing(scorer: sp.csr_matrix, favourite_of: sp.csr_matrix) -> np.ndarray:
    """Per row: scorer's score of favourite_of's best label over scorer's best score (0 where either is empty)."""
    label, _ = _row_best(favourite_of)
    _, top = _row_best(scorer)
    rows = np.flatnonzero((label >= 0) & (top > 0))
    out = np.zeros(scorer.shape[0])
    out[rows] = np.asarray(scorer[rows, label[rows]]).ravel() / top[rows]
    return out


def _row_best(matrix: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
    """(column, value) of each row's largest stored entry, the smaller column on ties; (-1, 0) for empty rows."""
    rows = np.repeat(np.arange(matrix.shape[0]), np.diff(matrix.indptr))
    order = np.lexsort((matrix.indices, -matrix.data, rows))
    first = order[matrix.indptr[:-1][np.diff(matrix.indptr) > 0]]
    column, value = np.full(matrix.shape[0], -1, dtype=np.int64), np.zeros(matrix.shape[0])
    column[rows[first]], value[rows[first]] = matrix.indices[first], matrix.data[first]
    return column, value


@dataclass(frozen=True)
class QueryLambda:
    """Picks a λ per query from the grid; without coefficients it is the fixed `fallback` λ."""

    grid: np.ndarray                 # (G,) candidate λ values
    fallback: float                  # the best fixed λ on the fitting queries
    tau: float                       # the features' softmax temperature
    b: int | None                    # the features' number of kept keys
    mean: np.ndarray | None = None   # (F,) feature means on the fitting queries
    scale: np.ndarray | None = None  # (F,) feature standard deviations (1 where constant)
    coef: np.ndarray | None = None   # (G, 1 + F) intercept and weights of each grid point's regression

    @property
    def uses_model(self) -> bool:
        return self.coef is not None

    def choose(self, features: np.ndarray) -> np.ndarray:
        """λ per row of `features` (columns as FEATURES)."""
        features = _check_features(features)
        if not self.uses_model:
            return np.full(len(features), self.fallback)
        return self.grid[_predicted(features, self.mean, self.scale, self.coef).argmax(axis=1)]

    def lambdas(self, ids: np.ndarray, sims: np.ndarray, Y_train: sp.spmatrix,
                parts: Parts | None = None) -> np.ndarray:
        """λ per query of a joint retrieval, from its features at this model's τ and b."""
        if not self.uses_model:
            return np.full(len(ids), self.fallback)
        return self.choose(query_features(ids, sims, Y_train, self.tau, self.b, parts))

    def check_settings(self, tau: float, b: int | None, origin: str | os.PathLike | None = None) -> QueryLambda:
        """This model, if fitted at the τ and b that score with it."""
        if (self.tau, self.b) != (tau, b):
            raise DataError(f"query-λ model fitted at tau={self.tau}, b={self.b}, but RAE here runs at tau={tau}, "
                            f"b={b}: rerun the tune stage", origin)
        return self

    def to_json(self) -> dict[str, Any]:
        """A plain dict for json.dump."""
        arrays = {name: None if getattr(self, name) is None else getattr(self, name).tolist()
                  for name in ("mean", "scale", "coef")}
        return {"features": list(FEATURES), "grid": self.grid.tolist(), "fallback": self.fallback,
                "tau": self.tau, "b": self.b, **arrays}

    @classmethod
    def from_json(cls, data: dict[str, Any], origin: str | None = None) -> QueryLambda:
        """The model of `to_json`'s dict; a DataError naming `origin` when it does not fit this code."""
        try:
            if list(data["features"]) != list(FEATURES):
                raise DataError(f"query-λ model uses features {data['features']}, this code computes {list(FEATURES)}",
                                origin)
            grid = _check_grid(data["grid"])
            arrays = [None if data[name] is None else np.asarray(data[name], dtype=np.float64)
                      for name in ("mean", "scale", "coef")]
            model = cls(grid, float(data["fallback"]), check_tau(data["tau"]), check_b(data["b"]), *arrays)
        except (KeyError, TypeError, ValueError) as error:  # a bad τ or b too: check_tau's and check_b's ValueError
            raise DataError(f"not a query-λ model: {error!r}", origin) from None
        fitted = [array is not None for array in arrays]
        shapes_fit = not any(fitted) or (all(fitted) and model.mean.shape == model.scale.shape == (len(FEATURES),)
                                         and model.coef.shape == (len(grid), 1 + len(FEATURES)))
        if not shapes_fit or not 0.0 <= model.fallback <= 1.0:
            raise DataError("query-λ model: mean, scale, coef or fallback do not fit its grid and features", origin)
        return model


def read_query_lambda(path: str | os.PathLike, tau: float, b: int | None) -> QueryLambda:
    """The model of a query_lambda.json, checked to be fitted at the τ and b RAE scores with here."""
    path = Path(path)
    if not path.is_file():
        raise DataError("no query-λ model: run the tune stage", path)
    data = read_json(path)
    if not isinstance(data, dict):
        raise DataError("not a JSON object", path)
    return QueryLambda.from_json(data, str(path)).check_settings(tau, b, path)


def fit_query_lambda(features: np.ndarray, targets: np.ndarray, grid: np.ndarray, tau: float, b: int | None,
                     folds: int = DEFAULT_FOLDS, ridge: float = DEFAULT_RIDGE,
                     seed: int = 0, fixed_lambda: float | None = None) -> tuple[QueryLambda, dict[str, Any]]:
    """The model from validation features (n, F) and their target metric at each grid λ (n, G), and a report of
    both scores: kept only when its `folds`-fold cross-validated target beats the fixed λ's (`fixed_lambda`, by
    default the best on all queries) by MARGIN_SE standard errors of the mean gain, so noise never wins a tie."""
    features, grid = _check_features(features), _check_grid(grid)
    targets = np.asarray(targets, dtype=np.float64)
    if targets.shape != (len(features), len(grid)) or not np.isfinite(targets).all():
        raise DataError(f"targets must be finite, shape {(len(features), len(grid))}, got {targets.shape}")
    if len(features) < 2 * folds:
        raise DataError(f"fitting a query-λ model needs at least {2 * folds} queries, got {len(features)}")
    fixed_means = targets.mean(axis=0)
    if fixed_lambda is None:
        best = int(fixed_means.argmax())
    else:
        on_grid = np.flatnonzero(np.isclose(grid, fixed_lambda))
        if len(on_grid) == 0:
            raise DataError(f"the fixed λ {fixed_lambda} is not on the grid {grid.tolist()}")
        best = int(on_grid[0])
    chosen = np.empty(len(features), dtype=np.int64)
    for held_out in np.array_split(np.random.default_rng(seed).permutation(len(features)), folds):
        fitting = np.setdiff1d(np.arange(len(features)), held_out)
        fold_model = _fit_linear(features[fitting], targets[fitting], ridge)
        chosen[held_out] = _predicted(features[held_out], *fold_model).argmax(axis=1)
    gain = targets[np.arange(len(features)), chosen] - targets[:, best]
    gain_floor = gain.mean() - MARGIN_SE * gain.std(ddof=1) / np.sqrt(len(gain))
    uses_model = gain_floor > 0
    fitted = _fit_linear(features, targets, ridge) if uses_model else (None, None, None)
    model = QueryLambda(grid, float(grid[best]), check_tau(tau), check_b(b), *fitted)
    report = {"queries": len(features), "folds": folds, "ridge": ridge, "fixed_lambda": float(grid[best]),
              "fixed_mean": float(fixed_means[best]), "model_cv_mean": float(targets[:, best].mean() + gain.mean()),
              "cv_gain": float(gain.mean()), "cv_gain_floor": float(gain_floor), "uses_model": bool(uses_model)}
    return model, report


def _fit_linear(features: np.ndarray, targets: np.ndarray, ridge: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean, scale, coef): every target column's ridge regression on the standardised features at once
    (intercept unpenalised), as least squares on rows augmented by sqrt(ridge)·I."""
    mean = features.mean(axis=0)
    scale = features.std(axis=0)
    scale[scale == 0] = 1.0
    n, width = features.shape
    design = np.hstack([np.ones((n, 1)), (features - mean) / scale])
    penalty = np.sqrt(ridge) * np.eye(1 + width)[1:]
    solution = np.linalg.lstsq(np.vstack([design, penalty]), np.vstack([targets, np.zeros((width, targets.shape[1]))]),
                               rcond=None)[0]
    return mean, scale, solution.T


def _predicted(features: np.ndarray, mean: np.ndarray, scale: np.ndarray, coef: np.ndarray) -> np.ndarray:
    """(n, G) predicted targets, as a row-wise sum: a matrix product's rounding would depend on the chunk."""
    return coef[:, 0] + (((features - mean) / scale)[:, None, :] * coef[None, :, 1:]).sum(axis=2)


def _check_features(features: np.ndarray) -> np.ndarray:
    features = np.asarray(features, dtype=np.float64)
    if features.ndim != 2 or features.shape[1] != len(FEATURES) or not np.isfinite(features).all():
        raise DataError(f"query features must be finite, shape (n, {len(FEATURES)}), got {features.shape}")
    return features


def _check_grid(grid: Any) -> np.ndarray:
    grid = np.asarray(grid, dtype=np.float64)
    if grid.ndim != 1 or grid.size == 0 or not np.all((grid >= 0.0) & (grid <= 1.0)):
        raise DataError(f"the λ grid must be values in [0, 1], got {grid.tolist()}")
    return grid
