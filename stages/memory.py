"""Choose the training-input keys RAE's memory keeps (`memory.keep`, by `memory.method`) and index them
beside the labels' (memory/input_memory.py says what the folder holds); keep and α auto are the tune stage's
choice (--choice). The dual encoder and kNN keep the index stage's indexes.
"""

from raexmc.numerics import pin_cpu_kernels

pin_cpu_kernels()  # first: NumPy and PyTorch choose their CPU kernels as they load (docs/reproducibility.md)

from pathlib import Path

import typer

from raexmc.data.dataset import Dataset
from raexmc.encoder.vectors import load_embeddings
from raexmc.memory.indexes import backend_for, search_device
from raexmc.memory.input_memory import build_input_memory, chosen_memory
from raexmc.memory.keys_values import training_values
from raexmc.pipeline.tracking.stage import stage_cli, tracked_stage


def main(dataset: Path = typer.Option(..., help="Dataset folder written by the download stage."),
         embeddings: Path = typer.Option(..., help="Embeddings folder written by the embed stage."),
         out: Path = typer.Option(..., help="Memory folder to write."),
         choice: Path | None = typer.Option(None, help="The tune stage's memory_choice.json: the keep and α to build "
                                                       "where memory.keep and memory.prototypes are auto."),
         params: Path = typer.Option(Path("params.yaml"), help="Parameters file.")) -> None:
    with tracked_stage("memory", params) as (p, run):
        backend = backend_for(p.index.backend, embeddings, search_device(p.search))  # the index stage's
        settings = chosen_memory(p.memory, backend, choice)
        run.params({"memory": p.memory.model_dump()})
        values = (training_values(Dataset(dataset).label_matrix("train"), p.infer.relevance, copy=False)
                  if settings.needs_values else None)
        labels = load_embeddings(embeddings, "labels") if settings.needs_labels else None
        meta = build_input_memory(load_embeddings(embeddings, "train"), values, settings, out,
                                  backend, labels=labels, M=p.index.M, ef_construction=p.index.ef_construction,
                                  threads=p.index.threads)
        run.metrics({"memory/keep": settings.keep, "memory/input_keys": meta["input_keys"],
                     "memory/num_inputs": meta["num_inputs"]})
        typer.echo(f"memory: {meta['input_keys']} of {meta['num_inputs']} input keys ({settings.method}, "
                   f"keep {settings.keep}, prior {'on' if settings.prior else 'off'}, "
                   f"compression {settings.compression}, label prototypes α {settings.prototypes})", err=True)


if __name__ == "__main__":
    stage_cli(main, __doc__)
