"""Embedding throughput of the embed stage's own loop (`embed_split`: length-sorted batches, host to
device, encode, back to the host, checked, written into a .npy memmap) at a preset's label shape,
on synthetic token ids, so no dataset download is needed.

    python bench/embed_speed.py --preset LF-AmazonTitles-131K --model all-MiniLM-L6-v2 --batch-sizes 256,1024
    python bench/embed_speed.py --preset LF-AmazonTitles-131K --model distilbert-sized --texts 1305265

Every text is at the preset's label_max_len (an upper bound on a real split's work), or, with
`--min-tokens`, of random length up to it, so that the length-sorted batches differ in width as a
real split's do. Beside the loop's texts/s it measures the bare
forward pass on token ids already on the device, at the same batch size and always at full length:
the gap between the two is the loop's own cost (host work, transfers, synchronisation, and with
`--min-tokens` the changing widths). Each measurement is appended to
bench/results/embed_speed.json (`--out`).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import typer

from common import ROOT, append_row, build_model, device_name, synthetic_token_cache
from raexmc.encoder.device import autocast, pick_device, resolve_precision
from raexmc.encoder.embedding import embed_split
from raexmc.encoder.sentence import attention_without_cudnn
from raexmc.encoder.text_encoder import TextEncoder
from raexmc.pipeline.presets import preset_values, presets_path


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def forward_only_rate(model, batch_size: int, width: int, device: str, precision: str, seconds: float) -> float:
    """Texts/s of the encoder alone on one batch of ids that already sits on the device, repeated for
    about `seconds`: the ceiling the embed loop could reach at this batch size. Its first, untimed
    pass also warms the device up for the loop measured after it (with `seconds` 0, only that)."""
    ids = torch.randint(1000, model.transformer.config.vocab_size, (batch_size, width), device=device)
    mask = torch.ones_like(ids)
    with torch.inference_mode(), autocast(device, precision):
        model(ids, mask)  # kernel selection, allocation
        synchronize(device)
        started, runs = time.perf_counter(), 0
        while time.perf_counter() - started < seconds:
            model(ids, mask)
            runs += 1
            if runs % 8 == 0:
                synchronize(device)
        synchronize(device)
    return runs * batch_size / max(time.perf_counter() - started, 1e-9)


def main(preset: str = typer.Option("LF-AmazonTitles-131K", help="A preset of presets.yaml (label_max_len)."),
         model: str = typer.Option("all-MiniLM-L6-v2", help="Encoder name or folder, or `distilbert-sized`."),
         texts: int = typer.Option(131_073, min=1, help="Texts to embed (131,073: LF-AmazonTitles-131K's labels)."),
         min_tokens: int = typer.Option(0, min=0, help="Text lengths uniform from this to label_max_len; "
                                        "0 = every text at label_max_len."),
         batch_sizes: str = typer.Option("256", help="Comma-separated embed.batch_size values to measure."),
         forward_seconds: float = typer.Option(3.0, min=0.0, help="Seconds of the bare-forward measurement; 0 = skip."),
         precision: str = typer.Option("auto", help="auto | fp32 | bf16 | fp16"),
         device: str = typer.Option("auto", help="auto | cpu | cuda | cuda:N"),
         out: Path = typer.Option(ROOT / "bench" / "results" / "embed_speed.json",
                                  help="JSON list to append to.")) -> None:
    width = preset_values(presets_path(ROOT / "params.yaml"), preset)["tokenize.label_max_len"]
    resolved_device = pick_device(device)
    resolved = resolve_precision(precision, resolved_device)
    encoder = build_model(model, resolved_device).eval()
    on_gpu = resolved_device.startswith("cuda")
    with tempfile.TemporaryDirectory() as folder:
        shortest = min(min_tokens, width) or width
        cache = synthetic_token_cache(Path(folder), {"labels": (texts, shortest, width)},
                                      encoder.transformer.config.vocab_size, np.random.default_rng(0))
        for batch_size in (int(size) for size in batch_sizes.split(",")):
            if on_gpu:
                torch.cuda.reset_peak_memory_stats(resolved_device)
            ceiling = forward_only_rate(encoder, batch_size, width, resolved_device, resolved, forward_seconds)
            loop = embed_split(TextEncoder(encoder, resolved_device, resolved), cache, "labels",
                               Path(folder) / "labels.npy", batch_size)
            result = {"preset": preset, "model": model, "precision": resolved, "texts": texts,
                      "tokens_per_text": [shortest, width],
                      "batch_size": batch_size, "texts_per_s": loop["texts_per_s"], "seconds": loop["seconds"],
                      "forward_only_texts_per_s": round(ceiling, 1) if forward_seconds else None,
                      "peak_gpu_memory_GB": (round(torch.cuda.max_memory_allocated(resolved_device) / 1e9, 2)
                                             if on_gpu else None),
                      "device": device_name(resolved_device),
                      "torch": torch.__version__,
                      "attention_kernels": [backend.name for backend in attention_without_cudnn()]}
            append_row(out, result)


if __name__ == "__main__":
    typer.run(main)
