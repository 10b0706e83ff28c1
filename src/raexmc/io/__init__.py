"""Stage files, one module an idea: outputs written atomically (atomic.py), writes checked where libraries do not
check them (checked_writes.py), files read back as one DataError naming them when missing or damaged
(checked_reads.py), and a folder's manifest of its files' sizes and sha256 (manifest.py). Their names are imported
from here, the one path every caller uses."""

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
from .manifest import MANIFEST_FILE, checked_manifest, write_manifest

__all__ = ["atomic_dir", "atomic_file", "mark_empty", "remove_dead_temps", "remove_leftovers", "scratch_dir",
           "write_json", "load_array", "load_arrays", "load_sparse", "read_json", "NO_ROOM", "checked_writes",
           "new_memmap", "require_size", "save_array", "written_through", "MANIFEST_FILE", "checked_manifest",
           "write_manifest", "writer_gone"]
