"""Choose RAE's λ and τ on training inputs held out from the memory, never on the test set: with `infer.lambda` /
`infer.tau` auto, the best of the grid by `infer.auto_metric` (widened past a chosen edge); with numbers, those.
It also chooses, where they say auto, the retrieval (joint or split) and a split's label share, the memory's keep
(`memory.keep`) and its label prototypes' α (`memory.prototypes`), each with λ and τ chosen afresh, and kNN's own τ.
Writes selection.json (the choice and every validation curve, which evaluate and package read) and
memory_choice.json (the keep and α the memory stage builds). It prints one line: the choice and the validation
value of each alternative, named in full."""

from raexmc.numerics import pin_cpu_kernels

pin_cpu_kernels()  # first: NumPy and PyTorch choose their CPU kernels as they load (docs/reproducibility.md)

from pathlib import Path

import typer

from raexmc.data.dataset import Dataset
from raexmc.evaluation.choice_report import choice_line, choice_metrics
from raexmc.evaluation.memory_choice import MemoryTuning, choose_keep
from raexmc.evaluation.propensity import chosen_propensity
from raexmc.evaluation.selection import select_knn
from raexmc.evaluation.selection_file import SELECTION_FILE, write_selection
from raexmc.evaluation.tune_settings import TuneSettings
from raexmc.evaluation.validation_memory import held_out_folds
from raexmc.io import atomic_dir, write_json
from raexmc.memory.indexes import backend_for, search_device
from raexmc.memory.input_memory import CHOICE_FILE, MemorySettings
from raexmc.pipeline.tracking.stage import stage_cli, tracked_stage
from raexmc.settings import AUTO


def main(dataset: Path = typer.Option(..., help="Dataset folder written by the download stage."),
         embeddings: Path = typer.Option(..., help="Embeddings folder written by the embed stage."),
         out: Path = typer.Option(..., help="Folder to write selection.json and memory_choice.json into."),
         params: Path = typer.Option(Path("params.yaml"), help="Parameters file.")) -> None:
    with tracked_stage("tune", params) as (p, run):
        settings, device = TuneSettings.from_settings(p), search_device(p.search)
        keep = None if p.memory.keep == AUTO else p.memory.keep
        grid = None if keep is not None else p.memory.keep_grid
        prototypes = p.memory.prototypes_grid if p.memory.prototypes == AUTO else None
        # checked before any work too: only the embeddings' headers are read, for index.backend auto's key count
        backend = backend_for(p.index.backend, embeddings, device)

        def memory_at(point: float, weight: float | None) -> MemorySettings:
            return MemorySettings.from_section(p.memory, backend, point, weight)

        for point in grid or (keep,):
            memory_at(point, prototypes[0] if prototypes else None)
        run.params({"infer": p.infer.model_dump(by_alias=True)})
        data = Dataset(dataset)
        Y_train = data.label_matrix("train")
        folds = held_out_folds(Y_train, data.filter_matrix("train"), settings)
        del Y_train  # the search's keys take its place
        propensity_ab = chosen_propensity(p.evaluate.propensity, data.names).ab
        tuning = MemoryTuning(embeddings, folds, settings, propensity_ab, memory_at, backend, prototypes, device)
        retrieval, selection = tuning.at(keep) if grid is None else choose_keep(tuning, grid)
        chosen = memory_at(keep if selection.keep is None else selection.keep, selection.prototypes)
        # kNN searches every training input: the chosen memory's search is kNN's where it keeps them all, deep enough
        selection = selection.with_(baselines={"knn": select_knn(
            lambda depth: retrieval if chosen.full and retrieval.b >= depth else tuning.full_memory(depth),
            settings, propensity_ab)})
        with atomic_dir(out) as folder:
            write_selection(folder, selection)
            write_json(folder / CHOICE_FILE, {"keep": chosen.keep, "prototypes": chosen.prototypes})
        run.metrics(choice_metrics(selection))
        run.artifact(*(out / name for name in (SELECTION_FILE, CHOICE_FILE)))
        typer.echo(choice_line(selection), err=True)


if __name__ == "__main__":
    stage_cli(main, __doc__)
