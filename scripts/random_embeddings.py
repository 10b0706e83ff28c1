"""Random unit embeddings in the embed stage's layout, at a download stage's shapes: the keys and queries
of the scale benchmarks (tune's memory, `bench/memory_budget.py scale`), where what the vectors mean does
not change time or memory, and a real encoder would take hours on CPU to embed 4.5M texts.

    python scripts/random_embeddings.py --dataset data/synthetic-LF-AmazonTitles-1.3M --out DIR [--dim 64]

Writes DIR/{train,labels,test}.npy (float32, N_train / L / N_test rows of stats.json), block by block.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import typer

from raexmc.io import new_memmap, read_json

BLOCK_ROWS = 1 << 16


def fill_random_unit(out: np.ndarray, rng: np.random.Generator) -> None:
    """Fill `out` (n, d) with seeded random unit rows, a block at a time: no second copy of a large array."""
    for start in range(0, len(out), BLOCK_ROWS):
        block = rng.standard_normal((min(BLOCK_ROWS, len(out) - start), out.shape[1]), dtype=np.float32)
        out[start:start + len(block)] = block / np.linalg.norm(block, axis=1, keepdims=True)


def main(dataset: Path = typer.Option(..., help="A download stage's folder (its stats.json gives the shapes)."),
         out: Path = typer.Option(..., help="Folder to write train.npy, labels.npy and test.npy into."),
         dim: int = typer.Option(64, help="Embedding width."),
         seed: int = typer.Option(0, help="Random seed.")) -> None:
    stats = read_json(dataset / "stats.json")
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for split, count in (("train", stats["N_train"]), ("labels", stats["L"]), ("test", stats["N_test"])):
        vectors = new_memmap(out / f"{split}.npy", np.float32, (count, dim))
        fill_random_unit(vectors, rng)
        vectors.flush()
        del vectors


if __name__ == "__main__":
    typer.run(main)
