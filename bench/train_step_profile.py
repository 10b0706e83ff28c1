"""Where one training step's time goes, at a preset's shape (the set-up of bench/train_speed.py):
the step's phases timed one by one with the device synchronised between them, then torch.profiler's
table of the operators that take the most time. Slower than the plain step (every phase waits for
the device), so it explains bench/train_speed.py's figures rather than replacing them.

    python bench/train_step_profile.py --preset LF-AmazonTitles-131K --model all-MiniLM-L6-v2
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import typer
from train_speed import preset_values, synthetic_training

from raexmc.encoder.device import resolve_precision
from raexmc.params import load_params
from raexmc.training.backward import encode_rows
from raexmc.training.batches import plan_batch
from raexmc.training.settings import TrainSettings
from raexmc.training.step import apply_gradients

ROOT = Path(__file__).resolve().parents[1]


def main(preset: str = typer.Option("LF-AmazonTitles-131K", help="A preset of params.yaml (batch size, lengths, m)."),
         model: str = typer.Option("all-MiniLM-L6-v2", help="Encoder name or folder, or `distilbert-sized`."),
         steps: int = typer.Option(10, min=1, help="Timed steps."),
         warmup: int = typer.Option(3, min=0, help="Untimed steps first."),
         labels: int = typer.Option(131_073, help="Synthetic label count."),
         top: int = typer.Option(25, min=1, help="Rows of the profiler's table."),
         device: str = typer.Option("auto", help="auto | cpu | cuda")) -> None:
    config = load_params(ROOT / "params.yaml")
    values = preset_values(config, preset)
    settings = replace(TrainSettings.from_params(config), batch_size=values["train.batch_size"],
                       num_hard_negatives=values["train.num_hard_negatives"], max_steps=warmup + steps, warmup_steps=0)
    with tempfile.TemporaryDirectory() as folder:
        run = synthetic_training(values, settings, model, device, labels, Path(folder))
        ctx, encoder = run.ctx, run.encoder
        precision = resolve_precision("auto", ctx.device)

        def sync() -> None:
            if ctx.device.startswith("cuda"):
                torch.cuda.synchronize(ctx.device)

        phases: dict[str, list[float]] = {}

        def timed(name: str, work):
            sync()
            started = time.perf_counter()
            result = work()
            sync()
            phases.setdefault(name, []).append(1000 * (time.perf_counter() - started))
            return result

        def step(number: int) -> None:
            encoder.zero_grad(set_to_none=True)
            plan = timed("plan batch (CPU)", lambda: plan_batch(run.Y, *run.sampler.batch(number, run.global_batch),
                                                                run.negatives, settings, ctx))
            x = timed("encode inputs", lambda: encode_rows(encoder, run.cache, "train", plan.input_rows, ctx, precision))
            z = timed("encode labels", lambda: encode_rows(encoder, run.cache, "labels", plan.label_rows, ctx,
                                                           precision))
            loss = timed("loss", lambda: plan.loss(x, z))
            timed("backward", loss.backward)
            timed("clip + AdamW", lambda: apply_gradients(run.params, run.optimizer, run.scheduler, settings.grad_clip))

        for number in range(warmup):
            step(number)
        phases.clear()
        for number in range(warmup, warmup + steps):
            step(number)
        summary = {name: round(float(np.mean(times)), 2) for name, times in phases.items()}
        summary["step (sum)"] = round(sum(summary.values()), 2)
        print(json.dumps({"preset": preset, "model": model, "device": ctx.device, "precision": precision,
                          "batch": settings.batch_size, "ms_per_phase": summary}))
        activities = [torch.profiler.ProfilerActivity.CPU]
        if ctx.device.startswith("cuda"):
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=activities) as profile:
            for number in range(warmup + steps, warmup + steps + 3):
                step(number)
        if ctx.device.startswith("cuda"):
            print(profile.key_averages().table(sort_by="self_cuda_time_total", row_limit=top))
        print(profile.key_averages().table(sort_by="self_cpu_time_total", row_limit=top))


if __name__ == "__main__":
    typer.run(main)
