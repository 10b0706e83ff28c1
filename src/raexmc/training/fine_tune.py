"""`fine_tune`: the train stage's recipe (train.trainee, train.train_on) in this process on the inputs build_model
takes, then build_model of the trained encoder, without DVC."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..data.dataset import Text
from ..encoder.device import pick_device
from ..io import scratch_dir
from ..process_group import DistContext
from ..rae.build import build_model, dataset_folder, token_cache
from ..rae.model import RaeModel, RaeSettings
from ..settings import TrainSection, section_from
from .train import train_on, trainee

# params.yaml's train section (tests/training/test_fine_tune.py holds it to the file)
TRAIN = TrainSection(nproc="auto", torchrun_args="", device="auto", precision="auto", schedule="fixed",
                     batch_size="auto", grad_cache_chunk="auto", lr="auto", max_steps="auto", warmup_steps="auto",
                     weight_decay=0.01, grad_clip=1.0, tau=0.04, hnm_steps="auto", hnm_topk=50, num_hard_negatives=2,
                     hard_negatives=True, instance_negatives=True, val_fraction=0.05, val_b=200, val_max_queries=20000,
                     val_lambda=0.5, validate_last=True, checkpoint_every=50, embed_batch_size="auto", seed=0)


def fine_tune(encoder: str | os.PathLike, inputs: Sequence[str | Text] = (),
              labels_of_inputs: Sequence[Sequence[int]] = (), label_texts: Sequence[str | Text] = (), *,
              out: str | os.PathLike, dataset: str | os.PathLike | None = None, train: Mapping[str, Any] = {},
              settings: RaeSettings = RaeSettings(), device: str = "auto", threads: int = 0) -> RaeModel:
    """build_model's model (the same arguments) of `encoder` fine-tuned on those inputs first, by the train stage's
    recipe in this one process on `device`: params.yaml's train section (TRAIN) with the keys in `train` changed,
    e.g. {"max_steps": 50}; its launch keys (nproc, torchrun_args, device) are not read."""
    section = section_from(TrainSection, "train", {**TRAIN.model_dump(), **train})
    with scratch_dir(out) as work:
        data = dataset_folder(work / "data", dataset, inputs, labels_of_inputs, label_texts)
        cache = token_cache(data, encoder, work / "tokens")
        ctx = DistContext(0, 1, pick_device(device))
        trained, recipe = trainee(str(encoder), section, cache, ctx, lambda: int(data.stats["N_train"]))
        train_on(trained, str(encoder), data, cache, recipe, ctx, work / "checkpoint.pt", lambda step, values: None)
        trained.save(work / "encoder")
        return build_model(work / "encoder", inputs, labels_of_inputs, label_texts, out=out, settings=settings,
                           dataset=None if dataset is None else data.folder, device=device, threads=threads)
