"""What an hnswlib index costs in bytes from its shape, said before the index stage builds it (and the
cost model of docs/scale.md): per key the float32 vector, 2·M level-0 links and a count, its label, on disk
a size of its upper links ((4·M + 4)/(M − 1) bytes on average), and loaded a pointer, level, mutex and map entry.
"""

from __future__ import annotations

LABEL_BYTES = 8          # hnswlib's labeltype (size_t)
LEVEL_SIZE_BYTES = 4     # on disk: the size of a key's upper-level link lists
RESIDENT_EXTRA_BYTES = 8 + 4 + 40 + 40   # loaded: link-list pointer, level, std::mutex, label map entry


def hnsw_key_bytes(dim: int, M: int) -> float:
    """Bytes per key of a saved hnswlib index (float32 vectors), on average over the random levels."""
    level0 = 4 * (2 * M) + 4
    upper = (4 * M + 4) / (M - 1)
    return 4 * dim + level0 + LABEL_BYTES + LEVEL_SIZE_BYTES + upper


def hnsw_disk_bytes(count: int, dim: int, M: int) -> int:
    """The size of hnswlib's saved file for `count` keys of `dim` float32 dimensions."""
    return round(count * hnsw_key_bytes(dim, M))


def hnsw_resident_bytes(count: int, dim: int, M: int) -> int:
    """The memory hnswlib holds for the loaded (or built) index, without the keys it was built from."""
    return round(count * (hnsw_key_bytes(dim, M) - LEVEL_SIZE_BYTES + RESIDENT_EXTRA_BYTES))
