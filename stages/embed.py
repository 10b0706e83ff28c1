"""Embed training inputs, label texts and test inputs from the token cache with the encoder the
train stage wrote (mean pooling, L2 normalisation), longest texts first, into .npy memmaps."""

import os
from pathlib import Path

import torch
import typer

from raexmc.checks import one_of, positive_int
from raexmc.encoder.device import pick_device, resolve_precision
from raexmc.encoder.embedding import STORAGE_DTYPES, embed_split
from raexmc.encoder.model import load_encoder
from raexmc.encoder.tokens import TokenCache
from raexmc.io import atomic_dir, write_json
from raexmc.pipeline.stage import run_stage, stage_cli


def main(model: Path = typer.Option(..., help="Encoder folder written by the train stage."),
         tokens: Path = typer.Option(..., help="Token cache folder written by the tokenize stage."),
         out: Path = typer.Option(..., help="Embeddings folder to write."),
         params: Path = typer.Option(Path("params.yaml"), help="Parameters file.")) -> None:
    def body(p, run) -> None:
        settings = p.section("embed")
        run.params({"embed": settings})
        batch_size = positive_int(p.typed("embed.batch_size", int), "embed.batch_size", p.path, "embed.batch_size")
        dtype = one_of(p.typed("embed.dtype", str), STORAGE_DTYPES, "embed.dtype", p.path, "embed.dtype")
        torch.set_num_threads(p.typed("embed.threads", int) or os.cpu_count() or 1)
        device = pick_device(p.typed("embed.device", str))
        precision = resolve_precision(p.typed("embed.precision", str), device)
        encoder = load_encoder(str(model), device)
        cache = TokenCache(tokens)
        throughput = {}
        with atomic_dir(out) as folder:
            for split in ("train", "labels", "test"):
                throughput[split] = embed_split(encoder, cache, split, folder / f"{split}.npy", batch_size,
                                                device, precision, dtype)
            # no timings in the output: rerunning on the same inputs must give the same bytes, or DVC
            # rebuilds the index downstream (and a multithreaded HNSW build is not bit-reproducible)
            write_json(folder / "meta.json", {"encoder": str(model), "device": device, "precision": precision,
                                              "dim": encoder.config.hidden_size})
        run.metrics(throughput)

    run_stage("embed", body, str(params))


if __name__ == "__main__":
    stage_cli(main, __doc__)
