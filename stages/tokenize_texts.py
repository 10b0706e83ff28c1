"""Tokenise the inputs and label texts of a dataset folder into the token cache (memory-mapped
token ids and lengths, keyed by tokenizer, max lengths and text fields)."""

from raexmc.numerics import pin_cpu_kernels

pin_cpu_kernels()  # first: NumPy and PyTorch choose their CPU kernels as they load (docs/reproducibility.md)

from pathlib import Path

import typer

from raexmc.data.dataset import Dataset
from raexmc.encoder.model import load_tokenizer
from raexmc.encoder.tokens import build_token_cache
from raexmc.pipeline.tracking.stage import stage_cli, tracked_stage


def main(dataset: Path = typer.Option(..., help="Dataset folder written by the download stage."),
         out: Path = typer.Option(..., help="Token cache folder to write."),
         params: Path = typer.Option(Path("params.yaml"), help="Parameters file.")) -> None:
    with tracked_stage("tokenize", params) as (p, run):
        name, settings = p.encoder.name, p.tokenize.model_dump()
        run.params({"encoder.name": name, "tokenize": settings})
        meta, reused = build_token_cache(Dataset(dataset), load_tokenizer(name), name, out, **settings)
        run.metrics({"truncated": meta["truncated"], "reused": int(reused)})
        run.artifact(out / "meta.json")


if __name__ == "__main__":
    stage_cli(main, __doc__)
