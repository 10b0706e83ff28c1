"""Training throughput of the real training step (encode inputs and labels, gather across ranks,
decoupled InfoNCE, backward, AdamW) at the shape of one of the paper's presets, on synthetic
token ids, so no dataset download is needed.

    python bench/train_speed.py --preset LF-AmazonTitles-131K --model all-MiniLM-L6-v2
    python bench/train_speed.py --preset LF-AmazonTitles-131K --model distilbert-sized
    python bench/train_speed.py --preset LF-AmazonTitles-131K --batch-size 7168 --grad-cache-chunk 512
    torchrun --nproc_per_node 8 bench/train_speed.py --preset LF-AmazonTitles-131K   # global batch x 8

Every text is at its full max_len (an upper bound on a real step's work). `distilbert-sized` is
DistilBERT's architecture with random weights (speed does not depend on the weights, and our
machines are offline). The recipe is params.yaml's `train` section with the preset's batch and m.
Besides steps/s and examples/s it projects the wall time of the preset's full schedule: its
max_steps steps of the paper's global batch (8 GPUs x the preset's batch per GPU) at the measured
examples/s. Each measurement is appended to bench/results/train_speed.json (`--out`).
"""

from __future__ import annotations

import resource
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
import typer

from common import ROOT, append_row, build_model, device_name, synthetic_token_cache
from raexmc.encoder.device import resolve_precision
from raexmc.encoder.sentence import attention_without_cudnn
from raexmc.encoder.text_encoder import TextEncoder
from raexmc.pipeline.presets import preset_values, presets_path
from raexmc.process_group import init_distributed, shutdown
from raexmc.settings import load_settings
from raexmc.training.settings import TrainSettings
from raexmc.training.step import BatchSampler, apply_gradients, make_optimizer, training_step

LABELS_PER_INPUT = (1, 5)  # synthetic positives per input, uniform in [1, 5)


def synthetic_labels(rows: int, labels: int, rng: np.random.Generator) -> sp.csr_matrix:
    """A random label matrix with a few positives per input, as the loss masks need them."""
    degree = rng.integers(*LABELS_PER_INPUT, size=rows)
    indptr = np.concatenate([[0], np.cumsum(degree)])
    indices = rng.integers(0, labels, size=indptr[-1])
    return sp.csr_matrix((np.ones(indptr[-1], np.float32), indices, indptr), shape=(rows, labels))


def main(preset: str = typer.Option("LF-AmazonTitles-131K", help="A preset of presets.yaml (batch size, lengths, m)."),
         model: str = typer.Option("all-MiniLM-L6-v2", help="Encoder name or folder, or `distilbert-sized`."),
         batch_size: int = typer.Option(0, help="Inputs per device; 0 = the preset's."),
         grad_cache_chunk: int = typer.Option(0, min=0, help="Gradient caching: texts per encoder pass; 0 = off."),
         steps: int = typer.Option(20, min=1, help="Timed steps."),
         warmup: int = typer.Option(3, min=0, help="Untimed steps first (allocation, kernel selection)."),
         labels: int = typer.Option(131_073, help="Synthetic label count."),
         precision: str = typer.Option("auto", help="auto | fp32 | bf16 | fp16"),
         device: str = typer.Option("auto", help="auto | cpu | cuda"),
         compile_encoder: bool = typer.Option(False, "--compile", help="Measure the encoder under torch.compile; "
                                              "it compiles again when the label count first changes, "
                                              "so keep --warmup >= 2."),
         out: Path = typer.Option(ROOT / "bench" / "results" / "train_speed.json",
                                  help="JSON list to append to.")) -> None:
    config = load_settings(ROOT / "params.yaml")
    values = preset_values(presets_path(ROOT / "params.yaml"), preset)
    # the preset's own batch and steps; N only matters to schedule: auto, which this does not time
    settings = replace(TrainSettings.from_section(config.train, lambda: 0),
                       batch_size=batch_size or values["train.batch_size"],
                       grad_cache_chunk=grad_cache_chunk, num_hard_negatives=values["train.num_hard_negatives"],
                       max_steps=warmup + steps, warmup_steps=0)
    ctx = init_distributed(device)
    global_batch = settings.batch_size * ctx.world_size
    rng = np.random.default_rng(0)
    rows = max(4 * global_batch, 1000)
    encoder = build_model(model, ctx.device)
    Y = synthetic_labels(rows, labels, rng)
    negatives = rng.integers(0, labels, size=(rows, settings.num_hard_negatives))
    params = [p for p in encoder.parameters() if p.requires_grad]
    optimizer, scheduler = make_optimizer(params, settings)
    sampler = BatchSampler(Y, np.arange(rows), settings.seed)
    shapes = {"train": (rows, values["tokenize.input_max_len"]), "labels": (labels, values["tokenize.label_max_len"])}
    with tempfile.TemporaryDirectory() as folder:  # every text at its full max_len
        cache = synthetic_token_cache(Path(folder), {split: (count, width, width) for split, (count, width) in
                                                     shapes.items()}, encoder.transformer.config.vocab_size, rng)
        resolved = resolve_precision(precision, ctx.device)
        step_encoder = TextEncoder(torch.compile(encoder) if compile_encoder else encoder, ctx.device, resolved)
        for step in range(settings.max_steps):
            if step == warmup:
                if ctx.device.startswith("cuda"):
                    torch.cuda.synchronize()
                started = time.perf_counter()
            batch_rows, positives = sampler.batch(step, global_batch)
            training_step(step_encoder, cache, Y, batch_rows, positives, negatives, settings, ctx)
            apply_gradients(params, optimizer, scheduler, settings.grad_clip)
        if ctx.device.startswith("cuda"):
            torch.cuda.synchronize()
        seconds = time.perf_counter() - started
    if ctx.is_main:
        on_gpu = ctx.device.startswith("cuda")
        examples_per_s = steps * global_batch / seconds
        schedule_batch = values["train.nproc"] * values["train.batch_size"]  # the paper's global batch
        result = {"preset": preset, "model": model, "parameters_M": round(sum(p.numel() for p in params) / 1e6, 1),
                  "device": device_name(ctx.device),
                  "processes": ctx.world_size, "precision": resolved, "batch_per_device": settings.batch_size,
                  "grad_cache_chunk": settings.grad_cache_chunk,
                  "compiled": compile_encoder, "torch": torch.__version__,
                  "attention_kernels": [backend.name for backend in attention_without_cudnn()],
                  "global_batch": global_batch,
                  "input_max_len": values["tokenize.input_max_len"], "label_max_len": values["tokenize.label_max_len"],
                  "steps": steps, "steps_per_s": round(steps / seconds, 3), "examples_per_s": round(examples_per_s, 1),
                  "peak_gpu_memory_GB": (round(torch.cuda.max_memory_allocated(ctx.device) / 1e9, 2)
                                         if on_gpu else None),
                  "peak_rss_GB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2),  # KiB on Linux
                  "schedule_steps": values["train.max_steps"], "schedule_global_batch": schedule_batch,
                  "projected_schedule_h": round(values["train.max_steps"] * schedule_batch / examples_per_s / 3600, 2)}
        append_row(out, result)
    shutdown(ctx)


if __name__ == "__main__":
    typer.run(main)
