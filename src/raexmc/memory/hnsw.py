"""Nearest-key search over the knowledge memory K = [X_train; Z_labels] by inner product.

Two backends share one result format, `(ids, sims)`:

* ids: int64 array (n_queries, k), key numbers, -1 where fewer than k keys were found;
* sims: float32 array (n_queries, k), inner products, -inf where the id is -1;

each row sorted by descending similarity, ties by ascending id.

`ExactIndex` multiplies query chunks by the key matrix; it is the ground truth and the backend for
small data. `HnswIndex` wraps an hnswlib graph (space "ip") for large data. `save_index` and
`load_index` persist either one in a folder holding `meta.json` (and `hnsw.bin` for HNSW).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError, DataError
from ..io import atomic_dir, read_json, write_json

BACKENDS = ("hnsw", "exact")
META_FILE = "meta.json"
HNSW_FILE = "hnsw.bin"
SPACE = "ip"

# Elements (not bytes) of scratch space the exact top-k selection may use beside the similarity block.
SELECT_BUDGET = 1 << 20
# Keys inserted per hnswlib add_items call (one progress-bar step) and queries per knn_query call.
INSERT_BATCH = 10_000
QUERY_BATCH = 16_384
# How much the beam (ef) grows when hnswlib cannot fill a batch's rows.
EF_RETRY_FACTOR = 4
_SHORT_RESULT = "contiguous 2D array"


def resolve_threads(threads: int) -> int:
    """The number of worker threads: `threads`, or every CPU this process may use when it is 0."""
    if threads < 0:
        raise ConfigError(f"threads must be >= 0 (0 = all CPUs), got {threads}")
    if threads:
        return int(threads)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _as_matrix(array: Any, what: str, dim: int | None = None) -> np.ndarray:
    """`array` as a C-contiguous float32 matrix (no copy when it already is one), checked."""
    matrix = np.ascontiguousarray(array, dtype=np.float32)
    if matrix.ndim != 2:
        raise DataError(f"{what} must be a 2-D matrix, got shape {matrix.shape}")
    if dim is not None and matrix.shape[1] != dim:
        raise DataError(f"{what} have dimension {matrix.shape[1]}, the index has {dim}")
    if not np.isfinite(matrix).all():
        raise DataError(f"{what} contain NaN or infinite values")
    return matrix


def _check_k(k: int) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ConfigError(f"k must be a positive integer, got {k!r}")
    return int(k)


def _empty_result(n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    return np.full((n, k), -1, dtype=np.int64), np.full((n, k), -np.inf, dtype=np.float32)


def _sort_rows(ids: np.ndarray, sims: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Order each row by descending similarity, then ascending id (padding last)."""
    order = np.lexsort((ids, -sims), axis=-1)
    return np.take_along_axis(ids, order, axis=1), np.take_along_axis(sims, order, axis=1)


class ExactIndex:
    """Exact inner-product top-k: a matrix product per chunk of `chunk_rows` queries.

    The keys are referenced, not copied, when they already are a C-contiguous float32 matrix. At
    most one similarity block of chunk_rows x n_keys float32 values exists at a time; the top-k
    selection works through that block a few rows at a time with about SELECT_BUDGET elements of
    scratch space. Among keys with equal similarity the smaller id wins, so results are
    deterministic even with duplicate keys.
    """

    backend = "exact"

    def __init__(self, keys: np.ndarray, chunk_rows: int = 4096):
        if chunk_rows < 1:
            raise ConfigError(f"chunk_rows must be >= 1, got {chunk_rows}")
        self.keys = _as_matrix(keys, "keys")
        self.chunk_rows = int(chunk_rows)

    @property
    def count(self) -> int:
        return self.keys.shape[0]

    @property
    def dim(self) -> int:
        return self.keys.shape[1]

    def __repr__(self) -> str:
        return f"ExactIndex(count={self.count}, dim={self.dim}, chunk_rows={self.chunk_rows})"

    def _scores(self, queries: np.ndarray) -> np.ndarray:
        """The similarity block of a chunk of queries against every key."""
        return queries @ self.keys.T

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        k = _check_k(k)
        queries = _as_matrix(queries, "queries", self.dim)
        ids, sims = _empty_result(queries.shape[0], k)
        if self.count == 0:
            return ids, sims
        width = min(k, self.count)
        for start in range(0, queries.shape[0], self.chunk_rows):
            block = self._scores(queries[start:start + self.chunk_rows])
            step = max(1, SELECT_BUDGET // self.count)
            for row in range(0, block.shape[0], step):
                part = block[row:row + step]
                top_ids = self._select(part, width)
                rows = slice(start + row, start + row + part.shape[0])
                ids[rows, :width] = top_ids
                sims[rows, :width] = np.take_along_axis(part, top_ids, axis=1)
            del block
        return ids, sims

    @staticmethod
    def _select(scores: np.ndarray, width: int) -> np.ndarray:
        """Per row, the ids of the `width` largest scores, by descending score then ascending id."""
        n_rows, n_keys = scores.shape
        if width < n_keys:
            # The width-th largest value of each row; every larger score is in, and of the scores
            # equal to it only the smallest ids that still fit.
            threshold = np.partition(scores, n_keys - width, axis=1)[:, n_keys - width, None]
            above = scores > threshold
            tied = scores == threshold
            room = width - above.sum(axis=1, keepdims=True)
            chosen = above | (tied & (np.cumsum(tied, axis=1, dtype=np.int32) <= room))
            top = np.nonzero(chosen)[1].reshape(n_rows, width)  # ascending ids per row
        else:
            top = np.broadcast_to(np.arange(n_keys, dtype=np.int64), (n_rows, n_keys))
        values = np.take_along_axis(scores, top, axis=1)
        order = np.argsort(-values, axis=1, kind="stable")
        return np.take_along_axis(top, order, axis=1).astype(np.int64, copy=False)


class HnswIndex:
    """An hnswlib graph over the keys (space "ip"); build it with `build_hnsw` or `load_index`.

    hnswlib does not store the search beam, so `search` sets ef = max(ef_search, k) every time.
    """

    backend = "hnsw"

    def __init__(self, graph, M: int, ef_construction: int, ef_search: int = 300, threads: int = 0):
        self.graph = graph
        self.M = int(M)
        self.ef_construction = int(ef_construction)
        self.ef_search = int(ef_search)
        self.threads = resolve_threads(threads)
        self.graph.set_num_threads(self.threads)
        self.graph.set_ef(self.ef_search)

    @property
    def count(self) -> int:
        return int(self.graph.element_count)

    @property
    def dim(self) -> int:
        return int(self.graph.dim)

    def __repr__(self) -> str:
        return (f"HnswIndex(count={self.count}, dim={self.dim}, M={self.M}, "
                f"ef_construction={self.ef_construction}, ef_search={self.ef_search})")

    def search(self, queries: np.ndarray, k: int, ef_search: int | None = None,
               progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Approximate top-k keys of each query; rows hnswlib cannot fill are padded, never dropped."""
        k = _check_k(k)
        queries = _as_matrix(queries, "queries", self.dim)
        ef = max(int(self.ef_search if ef_search is None else ef_search), k)
        ids, sims = _empty_result(queries.shape[0], k)
        width = min(k, self.count)
        if width == 0 or queries.shape[0] == 0:
            return ids, sims
        from tqdm import tqdm

        try:
            with tqdm(total=queries.shape[0], desc="hnsw search", unit="query", disable=not progress) as bar:
                for start in range(0, queries.shape[0], QUERY_BATCH):
                    batch = queries[start:start + QUERY_BATCH]
                    rows = slice(start, start + batch.shape[0])
                    ids[rows, :width], sims[rows, :width] = self._search_batch(batch, width, ef)
                    bar.update(batch.shape[0])
        finally:
            self.graph.set_ef(max(self.ef_search, 1))
        return _sort_rows(ids, sims)

    def _query(self, queries: np.ndarray, k: int, ef: int) -> tuple[np.ndarray, np.ndarray] | None:
        """hnswlib's answer, or None when it found fewer than k keys for some query."""
        self.graph.set_ef(ef)
        try:
            labels, distances = self.graph.knn_query(queries, k=k, num_threads=self.threads)
        except RuntimeError as exc:
            if _SHORT_RESULT in str(exc):
                return None
            raise
        # Space "ip" reports the distance 1 - <q, key>.
        return labels.astype(np.int64), (1.0 - distances).astype(np.float32)

    def _search_batch(self, batch: np.ndarray, k: int, ef: int) -> tuple[np.ndarray, np.ndarray]:
        found = self._query(batch, k, ef)
        if found is not None:
            return found
        # Some query reached fewer than k keys (typical with many identical keys): first a wider
        # beam for the whole batch, then halves of the batch, then single queries with smaller k.
        wide = ef * EF_RETRY_FACTOR
        found = self._query(batch, k, wide)
        if found is not None:
            return found
        return self._split(batch, k, wide)

    def _split(self, batch: np.ndarray, k: int, ef: int) -> tuple[np.ndarray, np.ndarray]:
        if batch.shape[0] == 1:
            return self._shrink(batch, k, ef)
        ids, sims = _empty_result(batch.shape[0], k)
        half = batch.shape[0] // 2
        for part in (slice(0, half), slice(half, batch.shape[0])):
            found = self._query(batch[part], k, ef)
            ids[part], sims[part] = found if found is not None else self._split(batch[part], k, ef)
        return ids, sims

    def _shrink(self, query: np.ndarray, k: int, ef: int) -> tuple[np.ndarray, np.ndarray]:
        """One query known to fail at k: the largest k that succeeds (binary search), padded to k."""
        ids, sims = _empty_result(1, k)
        good, bad = 0, k
        while bad - good > 1:
            middle = (good + bad) // 2
            found = self._query(query, middle, ef)
            if found is None:
                bad = middle
            else:
                good = middle
                ids[:, :middle], sims[:, :middle] = found
        return ids, sims


def build_hnsw(keys: np.ndarray, M: int = 64, ef_construction: int = 500, threads: int = 0, seed: int = 0,
               ef_search: int = 300, progress: bool = True) -> HnswIndex:
    """Insert every key (ids 0..n-1) into a new hnswlib "ip" graph, with a progress bar."""
    import hnswlib
    from tqdm import tqdm

    if M < 2:
        raise ConfigError(f"M must be >= 2, got {M}", "params.yaml", "index.M")
    if ef_construction < 1:
        raise ConfigError(f"ef_construction must be >= 1, got {ef_construction}", "params.yaml",
                          "index.ef_construction")
    keys = _as_matrix(keys, "keys")
    if keys.shape[0] == 0:
        raise DataError("no keys to index")
    n_threads = resolve_threads(threads)
    graph = hnswlib.Index(space=SPACE, dim=keys.shape[1])
    graph.init_index(max_elements=keys.shape[0], M=int(M), ef_construction=int(ef_construction),
                     random_seed=int(seed))
    with tqdm(total=keys.shape[0], desc="hnsw build", unit="key", disable=not progress) as bar:
        for start in range(0, keys.shape[0], INSERT_BATCH):
            chunk = keys[start:start + INSERT_BATCH]
            graph.add_items(chunk, np.arange(start, start + chunk.shape[0]), num_threads=n_threads)
            bar.update(chunk.shape[0])
    return HnswIndex(graph, M=M, ef_construction=ef_construction, ef_search=ef_search, threads=n_threads)


def make_index(backend: str, keys: np.ndarray, M: int = 64, ef_construction: int = 500, threads: int = 0,
               seed: int = 0, ef_search: int = 300, chunk_rows: int = 4096,
               progress: bool = True) -> ExactIndex | HnswIndex:
    """The index that `index.backend` names, over `keys`."""
    if backend == "exact":
        return ExactIndex(keys, chunk_rows=chunk_rows)
    if backend == "hnsw":
        return build_hnsw(keys, M=M, ef_construction=ef_construction, threads=threads, seed=seed,
                          ef_search=ef_search, progress=progress)
    raise ConfigError(f"unknown index backend {backend!r} (known: {', '.join(BACKENDS)})", "params.yaml",
                      "index.backend")


def save_index(index: ExactIndex | HnswIndex, folder: str | os.PathLike) -> Path:
    """Write `index` to `folder` atomically: meta.json, plus hnsw.bin for HNSW (exact keeps no keys)."""
    folder = Path(folder)
    meta: dict[str, Any] = {"backend": index.backend, "dim": index.dim, "count": index.count}
    if isinstance(index, HnswIndex):
        meta.update(M=index.M, ef_construction=index.ef_construction, space=SPACE)
    elif not isinstance(index, ExactIndex):
        raise TypeError(f"not an index: {type(index).__name__}")
    with atomic_dir(folder) as tmp:
        if isinstance(index, HnswIndex):
            index.graph.save_index(str(tmp / HNSW_FILE))
        write_json(tmp / META_FILE, meta)
    return folder


def _read_meta(folder: Path) -> dict[str, Any]:
    if not folder.is_dir():
        raise DataError("index folder not found", folder)
    try:
        meta = read_json(folder / META_FILE)
    except FileNotFoundError:
        raise DataError(f"not an index folder (no {META_FILE})", folder) from None
    except ValueError as exc:
        raise DataError(f"{META_FILE} is not valid JSON ({exc})", folder) from None
    if not isinstance(meta, dict):
        raise DataError(f"{META_FILE} must hold a JSON object", folder)
    backend = meta.get("backend")
    if backend not in BACKENDS:
        raise DataError(f"unknown index backend {backend!r} in {META_FILE} (known: {', '.join(BACKENDS)})", folder)
    needed = ("dim", "count") + (("M", "ef_construction", "space") if backend == "hnsw" else ())
    missing = [name for name in needed if name not in meta]
    if missing:
        raise DataError(f"{META_FILE} lacks {', '.join(missing)}", folder)
    for name in needed:
        if name != "space" and (isinstance(meta[name], bool) or not isinstance(meta[name], int) or meta[name] < 0):
            raise DataError(f"{META_FILE}: {name} must be a non-negative integer, got {meta[name]!r}", folder)
    return meta


def saved_backend(folder: str | os.PathLike) -> str:
    """The backend of the index saved in `folder` ("hnsw" or "exact"), from its checked meta.json."""
    return _read_meta(Path(folder))["backend"]


def load_index(folder: str | os.PathLike, keys: np.ndarray | None = None, ef_search: int = 300,
               threads: int = 0, chunk_rows: int = 4096) -> ExactIndex | HnswIndex:
    """Reopen an index written by `save_index`; the exact backend needs `keys` again.

    Given keys must match the saved dimension and count. HNSW comes back with ef set to ef_search.
    """
    folder = Path(folder)
    meta = _read_meta(folder)
    if keys is not None:
        keys = np.asarray(keys)
        if keys.ndim != 2 or keys.shape != (meta["count"], meta["dim"]):
            raise DataError(f"keys have shape {keys.shape}, the index was built on "
                            f"({meta['count']}, {meta['dim']})", folder)
    if meta["backend"] == "exact":
        if keys is None:
            raise DataError("the exact index keeps no keys: pass the keys to load it", folder)
        return ExactIndex(keys, chunk_rows=chunk_rows)
    import hnswlib

    if meta["space"] != SPACE:
        raise DataError(f"index space is {meta['space']!r}, expected {SPACE!r}", folder)
    path = folder / HNSW_FILE
    if not path.is_file():
        raise DataError(f"{HNSW_FILE} is missing", folder)
    graph = hnswlib.Index(space=SPACE, dim=meta["dim"])
    try:
        graph.load_index(str(path), max_elements=meta["count"])
    except RuntimeError as exc:
        raise DataError(f"cannot load {HNSW_FILE} ({exc})", folder) from None
    if graph.element_count != meta["count"]:
        raise DataError(f"{HNSW_FILE} holds {graph.element_count} keys, {META_FILE} says {meta['count']}", folder)
    return HnswIndex(graph, M=meta["M"], ef_construction=meta["ef_construction"], ef_search=ef_search,
                     threads=threads)


def recall_at_k(approx_ids: np.ndarray, exact_ids: np.ndarray) -> float:
    """Mean over queries of the share of exact top-k ids that the approximate search also found.

    -1 padding is ignored on both sides; queries without any exact id do not count (1.0 when
    no query has one).
    """
    approx_ids = np.asarray(approx_ids, dtype=np.int64)
    exact_ids = np.asarray(exact_ids, dtype=np.int64)
    if approx_ids.ndim != 2 or exact_ids.ndim != 2 or approx_ids.shape[0] != exact_ids.shape[0]:
        raise DataError(f"id matrices must be 2-D with the same rows, got {approx_ids.shape} and {exact_ids.shape}")
    valid = exact_ids >= 0
    wanted = valid.sum(axis=1)
    if not wanted.any():
        return 1.0
    # Tag each id with its row so one set test covers all queries.
    span = int(max(exact_ids.max(initial=-1), approx_ids.max(initial=-1))) + 2
    rows = np.arange(exact_ids.shape[0], dtype=np.int64)[:, None] * span
    approx_tags = (rows + approx_ids)[approx_ids >= 0]
    hits = valid & np.isin(rows + exact_ids, approx_tags)
    counted = wanted > 0
    return float(np.mean(hits.sum(axis=1)[counted] / wanted[counted]))
