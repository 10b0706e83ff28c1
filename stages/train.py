"""Fine-tune the shared encoder and save it for the embed stage (`encoder.mode: zero-shot`: export the
pre-trained one); with `train.nproc` > 1 under torchrun, one process per GPU.
"""

from raexmc.numerics import pin_cpu_kernels

pin_cpu_kernels()  # first: NumPy and PyTorch choose their CPU kernels as they load (docs/reproducibility.md)

from dataclasses import asdict
from pathlib import Path

import typer

from raexmc.data.dataset import Dataset
from raexmc.data.held_out import tune_split
from raexmc.encoder.device import embed_batch_size
from raexmc.encoder.tokens import TokenCache
from raexmc.io import atomic_dir, mark_empty, write_json
from raexmc.pipeline.tracking.stage import process_count, relaunch_under_torchrun, stage_cli, tracked_stage, user_errors
from raexmc.process_group import process_group
from raexmc.settings import load_settings
from raexmc.training.distributed import check_gpu_count
from raexmc.training.schedule import describe
from raexmc.training.settings import TrainSettings
from raexmc.training.train import as_table, train_on, trainee


def main(dataset: Path = typer.Option(..., help="Dataset folder written by the download stage."),
         tokens: Path = typer.Option(..., help="Token cache folder written by the tokenize stage."),
         out: Path = typer.Option(..., help="Folder for the trained (or exported) encoder."),
         checkpoints: Path = typer.Option(..., help="Folder for the resumable training checkpoint."),
         curves: Path = typer.Option(..., help="Folder for the validation curve (empty unless the run trained "
                                                "and validated)."),
         params: Path = typer.Option(Path("params.yaml"), help="Parameters file.")) -> None:
    with user_errors(params):
        p = load_settings(params)
        nproc = process_count(p.train.nproc)

        def n_train() -> int:  # read by schedule: auto, and by the fine-tuned split's check
            return int(Dataset(dataset).stats["N_train"])

        TrainSettings.from_section(p.train, n_train, nproc)  # the schedule resolved before any work
        mode = p.encoder.mode
        if mode == "fine-tuned":
            check_gpu_count(nproc, p.train.device, params, "train.nproc")
            tune_split(p, n_train)  # the tune stage validates on the split training holds out: it must hold one out
    if mode == "fine-tuned":
        relaunch_under_torchrun(nproc, p.train.torchrun_args)

    with process_group(p.train.device) as ctx, tracked_stage("train", params, ctx.is_main) as (p, run):
        name, data, cache = p.encoder.name, Dataset(dataset), TokenCache(tokens)
        # the recipe of every process; the encoder is saved with its tokenizer and the max length the token cache cut
        # inputs at (sentence_bert_config.json: sentence-transformers then cuts a text where this project does)
        encoder, trained = trainee(name, p.train, cache, ctx, n_train)
        used = embed_batch_size(trained.embed_batch_size, ctx.device)
        run.params({"encoder.name": name, "encoder.mode": mode, "encoder.pooling": encoder.recipe,
                    "train": {**p.train.model_dump(), "embed_batch_size_used": used, "encoder": encoder.describe(),
                              "resolved": {**asdict(trained.schedule), "grad_cache_chunk": trained.grad_cache_chunk}}})
        curve: list[dict] = []  # validation P@1 vs time (Figure 2); empty when zero-shot
        checkpoints.mkdir(parents=True, exist_ok=True)  # a DVC output in both modes
        if mode == "fine-tuned":
            if ctx.is_main:
                typer.echo(describe(p.train.schedule, data.stats["N_train"], ctx.world_size,
                                    trained.schedule, trained.grad_cache_chunk), err=True)
            curve = train_on(encoder, name, data, cache, trained, ctx, checkpoints / "last.pt",
                             lambda step, values: run.metrics(values, step=step))
        if ctx.is_main:
            # DVC draws a plot per file in `curves` and nothing for an empty folder, where an empty file would be
            # an empty panel, and one without validation points a missing-field error: the curve is written only
            # where the run trained and validated (MLflow has the loss of every run that trained).
            validated = bool(curve) and trained.validates
            with atomic_dir(out) as folder:
                encoder.save(folder)  # the sentence-transformers layout: the files carry the pooling
                write_json(folder / "raexmc.json", {"base": name, "mode": mode})
            with atomic_dir(curves) as curve_folder:  # after the encoder: a curve never sits beside an older one
                if validated:
                    write_json(curve_folder / "training_curve.json", as_table(curve))
                mark_empty(curve_folder)
            mark_empty(checkpoints)  # empty where it ran zero-shot
            if validated:
                run.artifact(curves / "training_curve.json")


if __name__ == "__main__":
    stage_cli(main, __doc__)
