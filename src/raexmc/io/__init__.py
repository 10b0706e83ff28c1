"""Stage files, imported from here: outputs whole or not at all, writes checked (atomic.py); reads that fail as one
DataError, checksums and a folder's manifest (reads.py)."""

from .atomic import *  # noqa: F403  (each module's __all__)
from .reads import *  # noqa: F403
