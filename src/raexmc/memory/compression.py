"""`memory.compression`'s names parsed in one place: none, fp16 | sq8 | sq4, ...-m<M> (the graph's
degree: hnswlib's at M=64 outweighs a quantised key, so a small memory needs a sparser graph too).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import PARAMS_FILE, ConfigError
from .search import EXACT_MAX_KEYS

NONE = "none"
FORMS = "none, fp16 | sq8 | sq4, each optionally ending in -m<M>"
_NAME = re.compile(r"(?P<codec>fp16|sq8|sq4)(?:-m(?P<M>[1-9][0-9]*))?")


@dataclass(frozen=True)
class Compression:
    """A parsed name: the codec and the degree (None: index.M)."""

    name: str
    codec: str
    M: int | None = None


def parse_compression(name: str) -> Compression | None:
    """The compression that `name` names, None for "none"; a ConfigError (one line) for anything else."""
    if name == NONE:
        return None
    match = _NAME.fullmatch(str(name))
    if match is None:
        raise ConfigError(f"unknown compression {name!r} (known forms: {FORMS})", PARAMS_FILE, "memory.compression")
    M = int(match["M"]) if match["M"] else None
    if M is not None and M < 2:
        raise ConfigError(f"compression {name!r}: M must be >= 2", PARAMS_FILE, "memory.compression")
    return Compression(name=name, codec=match["codec"], M=M)


def checked_compression(name: str, backend: str) -> Compression | None:
    """`name` parsed, refused unless the backend is hnsw (the exact backend builds no graph)."""
    compressed = parse_compression(name)
    if compressed is not None and backend != "hnsw":
        raise ConfigError(f"compression {name!r} needs an hnsw index, got {backend!r} (index.backend auto is "
                          f"exact up to {EXACT_MAX_KEYS:,} keys)", PARAMS_FILE, "memory.compression")
    return compressed
