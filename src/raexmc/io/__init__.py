"""Stage files, one module an idea, imported from here: atomic outputs (atomic.py), checked writes
(checked_writes.py), reads that fail as one DataError (checked_reads.py), checksums and a folder's manifest
(manifest.py).
"""

from .atomic import (
    atomic_dir,
    atomic_file,
    mark_empty,
    remove_dead_temps,
    remove_leftovers,
    scratch_dir,
    write_json,
    writer_gone,
)
from .checked_reads import load_array, load_arrays, load_sparse, read_json
from .checked_writes import NO_ROOM, checked_writes, new_memmap, require_size, save_array, written_through
from .manifest import MANIFEST_FILE, checked_manifest, file_digest, verify, write_manifest

__all__ = ["atomic_dir", "atomic_file", "mark_empty", "remove_dead_temps", "remove_leftovers", "scratch_dir",
           "write_json", "load_array", "load_arrays", "load_sparse", "read_json", "NO_ROOM", "checked_writes",
           "new_memmap", "require_size", "save_array", "written_through", "MANIFEST_FILE", "checked_manifest",
           "write_manifest", "writer_gone", "file_digest", "verify"]
