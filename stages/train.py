"""Fine-tune the shared encoder (decoupled InfoNCE, hard negatives, instance negatives) and save it
for the embed stage; with `encoder.mode: zero-shot` only export the pre-trained encoder.
With `train.nproc` > 1 the stage relaunches itself under torchrun (one process per GPU)."""

import hashlib
import json
from pathlib import Path

import typer

from raexmc.data.dataset import Dataset
from raexmc.encoder.device import embed_batch_size, resolve_precision
from raexmc.encoder.text_encoder import TextEncoder
from raexmc.encoder.tokens import TokenCache
from raexmc.errors import ConfigError
from raexmc.evaluation.propensity import table_propensity
from raexmc.io import atomic_dir, write_json
from raexmc.params import load_params
from raexmc.pipeline.stage import process_count, relaunch_under_torchrun, run_stage_on_rank, stage_cli, user_errors
from raexmc.training.distributed import check_gpu_count, init_distributed, shutdown
from raexmc.training.settings import TrainSettings
from raexmc.training.train import train

MODES = ("zero-shot", "fine-tuned")


def main(dataset: Path = typer.Option(..., help="Dataset folder written by the download stage."),
         tokens: Path = typer.Option(..., help="Token cache folder written by the tokenize stage."),
         out: Path = typer.Option(..., help="Folder for the trained (or exported) encoder."),
         checkpoints: Path = typer.Option(..., help="Folder for the resumable training checkpoint."),
         params: Path = typer.Option(Path("params.yaml"), help="Parameters file.")) -> None:
    with user_errors():
        p = load_params(params)
        settings = TrainSettings.from_params(p)  # every train.* value checked before any work
        nproc = process_count(p.get("train.nproc"), "train.nproc", p.path)
        mode = p.typed("encoder.mode", str)
        if mode not in MODES:
            raise ConfigError(f"encoder.mode must be one of {', '.join(MODES)}", p.path, "encoder.mode")
        if mode == "fine-tuned":
            check_gpu_count(nproc, p.typed("train.device", str), p.path, "train.nproc")
    if mode == "fine-tuned":
        relaunch_under_torchrun(nproc, p.typed("train.torchrun_args", str))

    ctx = init_distributed(p.typed("train.device", str))

    def body(p, run) -> None:
        name = p.typed("encoder.name", str)
        precision = resolve_precision(p.typed("train.precision", str), ctx.device, p.path, "train.precision")
        encoder = TextEncoder.load(name, ctx.device, precision)  # its tokenizer too: saved with the model
        if run is not None:
            used = embed_batch_size(settings.embed_batch_size, ctx.device)
            run.params({"encoder.name": name, "encoder.mode": mode, "encoder.pooling": encoder.recipe,
                        "train": {**p.section("train"), "embed_batch_size_used": used, "encoder": encoder.describe()}})
        curve: list[dict] = []  # validation P@1 vs time (Figure 2); empty when zero-shot
        checkpoints.mkdir(parents=True, exist_ok=True)  # a DVC output in both modes
        if mode == "fine-tuned":
            data, cache = Dataset(dataset), TokenCache(tokens)
            fingerprint = hashlib.sha256(json.dumps([name, encoder.recipe, vars(settings), data.stats, cache.meta["key"],
                                                     ctx.world_size], sort_keys=True).encode()).hexdigest()

            def log(step: int, values: dict) -> None:
                if run is not None:
                    run.metrics(values, step=step)

            curve = train(encoder, cache, data.label_matrix("train"), data.filter_matrix("train"), settings, ctx,
                          checkpoints / "last.pt", table_propensity(data.names).ab, log, fingerprint)
        if ctx.is_main:
            with atomic_dir(out) as folder:
                encoder.save(folder)  # the sentence-transformers layout: the files carry the pooling
                write_json(folder / "raexmc.json", {"base": name, "mode": mode})
                write_json(folder / "training_curve.json", curve)
            if run is not None and curve:
                run.artifact(out / "training_curve.json")
        shutdown(ctx)

    run_stage_on_rank("train", body, str(params), ctx.is_main)


if __name__ == "__main__":
    stage_cli(main, __doc__)
