"""A share `keep` of the training-input keys for a smaller memory: a seeded sample (random, the control), or
spherical k-means centroids with their mean value rows and member counts (kmeans; kmeans-labels clusters
unit(x + unit(mean label key)) so look-alike inputs with other labels stay apart): near-duplicate inputs vote
together anyway, so merging them keeps every input's labels. Two levels (coarse cells, then k-means per cell) so
the largest array is a chunk of inputs by one cell's centroids.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

CELL_SIZE = 2_048          # inputs per coarse cell: the fine k-means costs about keep · N · CELL_SIZE · d per iteration
COARSE_SAMPLE = 64         # inputs sampled per coarse cell to fit the cells
ITERATIONS = 10            # Lloyd iterations per level
ASSIGN_BYTES = 64 << 20    # scratch of one chunk of similarities (inputs x centroids, float32)


@dataclass
class SelectedKeys:
    """The memory's input keys after selection: (K, d) unit keys, (K, L) values, members per key."""

    keys: np.ndarray
    values: sp.csr_matrix
    counts: np.ndarray


def kept_count(keep: float, num_inputs: int) -> int:
    """The number of input keys a share `keep` in [0, 1] of `num_inputs` keeps (rounded half up)."""
    return int(math.floor(keep * num_inputs + 0.5))


def select_keys(inputs: np.ndarray, values: sp.csr_matrix, keep: float, method: str, seed: int = 0,
                cell_size: int = CELL_SIZE, progress: bool = False, labels: np.ndarray | None = None) -> SelectedKeys:
    """kept_count(keep, N) keys by `method` (keep 1: every input as it is); kmeans-labels needs `labels`' keys."""
    count = kept_count(keep, len(inputs))
    values = sp.csr_matrix(values)
    if len(inputs) != values.shape[0]:
        raise ValueError(f"{len(inputs)} input keys but {values.shape[0]} value rows")
    rng = np.random.default_rng(seed)
    if count == 0 or count == len(inputs) or method == "random":
        rows = (np.arange(len(inputs)) if count == len(inputs)
                else np.sort(rng.choice(len(inputs), count, replace=False)))
        return SelectedKeys(np.asarray(inputs[rows], dtype=np.float32), values[rows], np.ones(count, dtype=np.int64))
    points = inputs
    if method == "kmeans-labels":
        if labels is None:
            raise ValueError("kmeans-labels needs the labels' keys")
        points = InputsWithLabels(inputs, values, labels)
    clusters = two_level_kmeans(points, count, rng, cell_size, progress)
    return merge_clusters(inputs, values, clusters, count)


class InputsWithLabels:
    """The points kmeans-labels clusters, unit(x_i + unit(mean of i's labels' keys)), made a block at a time."""

    def __init__(self, inputs: np.ndarray, values: sp.csr_matrix, labels: np.ndarray):
        if values.shape[1] != len(labels):
            raise ValueError(f"{values.shape[1]} labels in the value rows but {len(labels)} label keys")
        positives = sp.csr_matrix((np.ones(values.nnz, dtype=np.float32), values.indices, values.indptr),
                                  shape=values.shape)
        self.inputs, self.labels, self.positives = inputs, labels, positives

    def __len__(self) -> int:
        return len(self.inputs)

    def __getitem__(self, rows) -> np.ndarray:
        keys = np.asarray(self.inputs[rows], dtype=np.float32)
        return unit_rows(keys + unit_rows(np.asarray(self.positives[rows] @ self.labels, dtype=np.float32)))


def merge_clusters(inputs: np.ndarray, values: sp.csr_matrix, clusters: np.ndarray, count: int) -> SelectedKeys:
    """One key per (non-empty) cluster: its members' unit mean direction, mean value row and number."""
    members = _membership(clusters, count)
    counts = np.asarray(members.sum(axis=1)).ravel().astype(np.int64)
    keys = np.zeros((count, inputs.shape[1]), dtype=np.float32)
    for start in range(0, len(inputs), 1 << 16):  # the inputs may be a memory map: read them once, in blocks
        block = np.asarray(inputs[start:start + (1 << 16)], dtype=np.float32)
        keys += members[:, start:start + len(block)] @ block
    values = sp.csr_matrix(sp.diags(1.0 / counts) @ members.astype(np.float64) @ values)
    return SelectedKeys(unit_rows(keys), values, counts)


def two_level_kmeans(inputs: np.ndarray, count: int, rng: np.random.Generator, cell_size: int = CELL_SIZE,
                     progress: bool = False) -> np.ndarray:
    """Each input's cluster in 0..count-1, none empty: coarse cells, then k-means per cell at its share."""
    n = len(inputs)
    cells = max(1, min(math.ceil(n / cell_size), count))  # at most one cell per key: each gets one or more
    if cells == 1:
        cell_of = np.zeros(n, dtype=np.int64)
    else:
        sample = np.sort(rng.choice(n, min(n, cells * COARSE_SAMPLE), replace=False))
        centroids = spherical_kmeans_centroids(np.asarray(inputs[sample], dtype=np.float32), cells, rng)
        cell_of = assign(inputs, centroids)[0]
    sizes = np.bincount(cell_of, minlength=cells)
    budgets = _shares(sizes, count)
    clusters = np.empty(n, dtype=np.int64)
    order = np.argsort(cell_of, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    from ..progress import progress_bar

    offset = 0
    for cell in progress_bar(range(cells), desc="k-means per cell", unit="cell", disable=not progress or cells == 1):
        rows = order[bounds[cell]:bounds[cell + 1]]
        if budgets[cell] == 0:  # an empty cell
            continue
        points = np.asarray(inputs[rows], dtype=np.float32)
        fine, fit = assign(points, spherical_kmeans_centroids(points, int(budgets[cell]), rng))
        clusters[rows] = offset + _fill_empty(fine, fit, int(budgets[cell]))
        offset += int(budgets[cell])
    return clusters


def _shares(sizes: np.ndarray, count: int) -> np.ndarray:
    """`count` split over cells: one per non-empty cell, the rest by largest remainders, none over its size."""
    base = (sizes > 0).astype(np.int64)
    rest = sizes - base
    exact = rest * ((count - base.sum()) / max(1, rest.sum()))
    shares = np.floor(exact).astype(np.int64)
    extra = count - int(base.sum()) - int(shares.sum())
    shares[np.argsort(-(exact - shares), kind="stable")[:extra]] += 1
    return base + shares


def spherical_kmeans_centroids(points: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k unit centroids by ITERATIONS of Lloyd's on cosine similarity; an emptied cluster takes the worst-fit point."""
    centroids = points[rng.choice(len(points), k, replace=False)].copy()
    for _ in range(ITERATIONS):
        clusters, fit = assign(points, centroids)
        centroids = unit_rows(_membership(_fill_empty(clusters, fit, k), k) @ points)
    return centroids


def assign(points: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each point's most similar centroid and that similarity, in chunks of bounded scratch."""
    rows = max(1, ASSIGN_BYTES // (4 * max(1, len(centroids))))
    best = np.empty(len(points), dtype=np.int64)
    fit = np.empty(len(points), dtype=np.float32)
    for start in range(0, len(points), rows):
        sims = np.asarray(points[start:start + rows], dtype=np.float32) @ centroids.T
        best[start:start + rows] = np.argmax(sims, axis=1)
        fit[start:start + rows] = sims[np.arange(len(sims)), best[start:start + rows]]
    return best, fit


def _fill_empty(clusters: np.ndarray, fit: np.ndarray, k: int) -> np.ndarray:
    """Each empty cluster takes the worst-fitting point of a cluster with two or more members."""
    sizes = np.bincount(clusters, minlength=k)
    empty = np.nonzero(sizes == 0)[0]
    if not len(empty):
        return clusters
    clusters = clusters.copy()
    candidates = iter(np.argsort(fit, kind="stable"))
    for cluster in empty:
        point = next(p for p in candidates if sizes[clusters[p]] > 1)
        sizes[clusters[point]] -= 1
        clusters[point], sizes[cluster] = cluster, 1
    return clusters


def _membership(clusters: np.ndarray, k: int) -> sp.csr_matrix:
    """(k, n) float32: row c has a 1 at each member of cluster c, so that it times the points sums each cluster."""
    return sp.csr_matrix((np.ones(len(clusters), dtype=np.float32), (clusters, np.arange(len(clusters)))),
                         shape=(k, len(clusters)))


def unit_rows(rows: np.ndarray) -> np.ndarray:
    """`rows` scaled to unit length, as float32 (a zero row stays zero)."""
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return (rows / np.where(norms > 0, norms, 1.0)).astype(np.float32)
