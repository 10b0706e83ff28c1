"""Reading the embed stage's vectors, without torch: the stages that only search them (tune, memory, evaluate,
package) would otherwise carry torch's ~200 MB of resident libraries beside the indexes."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..io import load_array


def load_embeddings(folder: str | os.PathLike, split: str) -> np.ndarray:
    """The split's vectors (rows in the split's order), memory-mapped: pages are read as they are used."""
    return load_array(Path(folder) / f"{split}.npy", mmap_mode="r")
