"""Embed the training inputs, test inputs and label texts of the token cache with the train stage's encoder
into .npy memmaps; with `embed.nproc` > 1 under torchrun, rank 0 writing one process's files.
"""

from raexmc.numerics import pin_cpu_kernels

pin_cpu_kernels()  # first: NumPy and PyTorch choose their CPU kernels as they load (docs/reproducibility.md)

import os
from contextlib import nullcontext
from pathlib import Path

import torch
import typer

from raexmc.encoder.device import embed_batch_size, pick_device, resolve_precision
from raexmc.encoder.embedding import embed_splits
from raexmc.encoder.text_encoder import TextEncoder
from raexmc.encoder.tokens import TokenCache
from raexmc.io import atomic_dir, write_json
from raexmc.pipeline.tracking.stage import process_count, relaunch_under_torchrun, stage_cli, tracked_stage, user_errors
from raexmc.process_group import process_group
from raexmc.settings import load_settings


def main(model: Path = typer.Option(..., help="Encoder folder written by the train stage."),
         tokens: Path = typer.Option(..., help="Token cache folder written by the tokenize stage."),
         out: Path = typer.Option(..., help="Embeddings folder to write."),
         params: Path = typer.Option(Path("params.yaml"), help="Parameters file.")) -> None:
    with user_errors(params):  # every embed.* value checked before any process starts
        setting = load_settings(params).embed
        dtype, nproc, torchrun_args = setting.dtype, process_count(setting.nproc), setting.torchrun_args
        device = pick_device(setting.device, params, "embed.device")
        batch_size = embed_batch_size(setting.batch_size, device)
        if device == "cpu" and setting.nproc == "auto":
            nproc = 1  # 'auto' counts GPUs: CPU processes would only compete for the same cores
    relaunch_under_torchrun(nproc, torchrun_args)
    # a torchrun worker takes the GPU of its local rank; one process keeps the device asked for (cuda:N)
    with process_group(device, as_given=True) as ctx, tracked_stage("embed", params, ctx.is_main) as (p, run):
        torch.set_num_threads(p.embed.threads or os.cpu_count() or 1)
        precision = resolve_precision(p.embed.precision, ctx.device, params, "embed.precision")
        encoder = TextEncoder.load(model, ctx.device, precision, stage_output=True)
        run.params({"embed": {**p.embed.model_dump(), "batch_size_used": batch_size, "encoder": encoder.describe()},
                    "encoder.pooling": encoder.recipe})
        with atomic_dir(out) if ctx.is_main else nullcontext() as folder:  # rank 0 writes what every rank embeds
            throughput = embed_splits(encoder, TokenCache(tokens), folder, batch_size, dtype, ctx.rank, ctx.world_size)
            if ctx.is_main:
                # no timings in the output: rerunning on the same inputs must give the same bytes, or DVC
                # rebuilds the index downstream (and a multithreaded HNSW build is not bit-reproducible)
                write_json(folder / "meta.json", {"encoder": str(model), "device": device, "precision": precision,
                                                  "dim": encoder.dim})
        run.metrics({**throughput, "processes": ctx.world_size})


if __name__ == "__main__":
    stage_cli(main, __doc__)
