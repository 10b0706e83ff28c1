"""Search on an hnswlib graph (space "ip"). hnswlib raises when it finds fewer than k keys (many identical keys):
`search` retries with a wider beam, halves of the batch, a smaller k, and pads, so no query is dropped.
"""

from __future__ import annotations

import os

import numpy as np

from .search import Index, empty_result, key_blocks, keys_to_index

SPACE = "ip"
PAPER_M, PAPER_EF_CONSTRUCTION, PAPER_EF_SEARCH = 64, 500, 300  # the paper's graph and search beam
# Keys per add_items call and queries per knn_query call (also the block evaluate merges: at b = 200 about 20 KB a
# query, so 4,096 stay near 80 MB while every thread gets thousands of queries a call).
INSERT_BATCH = 10_000
QUERY_BATCH = 4_096
# How much the beam (ef) grows when hnswlib cannot fill a batch's rows.
EF_RETRY_FACTOR = 4
_SHORT_RESULT = "contiguous 2D array"


def resolve_threads(threads: int) -> int:
    """The number of worker threads: `threads`, or every CPU this process may use when it is 0."""
    if threads:
        return int(threads)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class HnswIndex(Index):
    """An hnswlib graph over the keys; hnswlib does not store the beam, so `search` sets ef = max(ef_search, k)."""

    shown = ("count", "dim", "M", "ef_construction", "ef_search")  # what repr() says
    backend = "hnsw"
    space = SPACE
    count = property(lambda self: int(self.graph.element_count))
    dim = property(lambda self: int(self.graph.dim))
    # Queries searched together: the retries of a batch hnswlib cannot fill change its other queries' beam.
    query_block, sorts_after = QUERY_BATCH, True

    def __init__(self, graph, M: int, ef_construction: int, ef_search: int = PAPER_EF_SEARCH, threads: int = 0):
        self.graph, self.M, self.ef_construction, self.ef_search = graph, int(M), int(ef_construction), int(ef_search)
        self.threads = resolve_threads(threads)
        self.graph.set_num_threads(self.threads)
        self.graph.set_ef(self.ef_search)

    def search(self, queries: np.ndarray, k: int, progress: bool = False, **options):
        try:
            return super().search(queries, k, progress, **options)
        finally:  # the beam a search set (a wider one on retries) goes back to ef_search
            self.graph.set_ef(max(self.ef_search, 1))

    def _block(self, queries, width, k, ef_search: int | None = None):
        ef = max(int(self.ef_search if ef_search is None else ef_search), k)
        found = self._query(queries, width, ef)
        return found if found is not None else self._retried(queries, width, ef * EF_RETRY_FACTOR)

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

    def _retried(self, batch: np.ndarray, k: int, ef: int) -> tuple[np.ndarray, np.ndarray]:
        """Some query reached fewer than k keys: a wider beam, else each half, down to one query at a smaller k."""
        found = self._query(batch, k, ef)
        if found is not None:
            return found
        if batch.shape[0] == 1:
            return self._shrink(batch, k, ef)
        half = batch.shape[0] // 2
        ids, sims = zip(*(self._retried(part, k, ef) for part in (batch[:half], batch[half:])))
        return np.vstack(ids), np.vstack(sims)

    def _shrink(self, query: np.ndarray, k: int, ef: int) -> tuple[np.ndarray, np.ndarray]:
        """One query known to fail at k: the largest k that succeeds (binary search), padded to k."""
        ids, sims = empty_result(1, k)
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


def build_hnsw(keys: np.ndarray, M: int = PAPER_M, ef_construction: int = PAPER_EF_CONSTRUCTION, threads: int = 0,
               seed: int = 0, ef_search: int = PAPER_EF_SEARCH, progress: bool = True,
               progress_label: str = "keys") -> HnswIndex:
    """Insert every key (ids 0..n-1) into a new hnswlib "ip" graph on `threads` threads (0: every CPU)."""
    import hnswlib

    keys = keys_to_index(keys)
    n_threads = resolve_threads(threads)
    graph = hnswlib.Index(space=SPACE, dim=keys.shape[1])
    graph.init_index(max_elements=keys.shape[0], M=int(M), ef_construction=int(ef_construction), random_seed=int(seed))
    for start, chunk in key_blocks(keys, INSERT_BATCH, f"hnsw build ({progress_label})", progress):
        graph.add_items(chunk, np.arange(start, start + chunk.shape[0]), num_threads=n_threads)
    return HnswIndex(graph, M=M, ef_construction=ef_construction, ef_search=ef_search, threads=n_threads)


# What an index costs in bytes from its shape, said before the index stage builds it (and docs/scale.md's cost
# model): per key the float32 vector, 2·M level-0 links and a count, its label, on disk a size of its upper links
# ((4·M + 4)/(M − 1) bytes on average), and loaded a pointer, level, mutex and label-map entry.
LABEL_BYTES = 8          # hnswlib's labeltype (size_t)
LEVEL_SIZE_BYTES = 4     # on disk: the size of a key's upper-level link lists
RESIDENT_EXTRA_BYTES = 8 + 4 + 40 + 40   # loaded: link-list pointer, level, std::mutex, label map entry


def hnsw_key_bytes(dim: int, M: int) -> float:
    """Bytes per key of a saved hnswlib index (float32 vectors), on average over the random levels."""
    return 4 * dim + (4 * (2 * M) + 4) + LABEL_BYTES + LEVEL_SIZE_BYTES + (4 * M + 4) / (M - 1)


def hnsw_disk_bytes(count: int, dim: int, M: int) -> int:
    """The size of hnswlib's saved file for `count` keys of `dim` float32 dimensions."""
    return round(count * hnsw_key_bytes(dim, M))


def hnsw_resident_bytes(count: int, dim: int, M: int) -> int:
    """The memory hnswlib holds for the loaded (or built) index, without the keys it was built from."""
    return round(count * (hnsw_key_bytes(dim, M) - LEVEL_SIZE_BYTES + RESIDENT_EXTRA_BYTES))


def hnsw_estimate(key_set: str, shape: tuple[int, int], M: int) -> str:
    """What the build will cost in bytes, said before it starts (the progress bar then gives its ETA)."""
    count, dim = shape
    return (f"index: {key_set}: {count:,} keys x {dim} dims, M={M}: {hnsw_disk_bytes(count, dim, M) / 1e6:,.2f} MB "
            f"on disk, about {(hnsw_resident_bytes(count, dim, M) + count * dim * 4) / 1e6:,.0f} MB of memory "
            "while it is built")
