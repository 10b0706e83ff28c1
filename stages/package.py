"""Package the pipeline for prediction: save one self-contained RAE model folder (rae/model.py: RaeModel.save)
with the encoder, RAE's two indexes (the memory stage's own where it has them, else the index stage's; HNSW
graphs built here where the index stage kept exact ones for a GPU: rae/packaging.py), the values and member
counts of the memory RAE searches (memory.keep, method, prior), the labels' own ids and texts, the λ, τ and
retrieval the tune stage chose and a model card.
`raexmc predict` and `raexmc serve` load it (the track stage registers it once evaluate has measured it)."""

from raexmc.numerics import pin_cpu_kernels

pin_cpu_kernels()  # first: NumPy and PyTorch choose their CPU kernels as they load (docs/reproducibility.md)

from pathlib import Path

import typer

import raexmc
from raexmc.data.dataset import Dataset
from raexmc.encoder.text_encoder import TextEncoder
from raexmc.evaluation.selection_file import read_selection
from raexmc.pipeline.tracking.stage import stage_cli, tracked_stage
from raexmc.rae.model import RaeSettings
from raexmc.rae.packaging import package_model


def main(dataset: Path = typer.Option(..., help="Dataset folder written by the download stage."),
         model: Path = typer.Option(..., help="Encoder folder written by the train stage."),
         embeddings: Path = typer.Option(..., help="Embeddings folder (keys, for an exact index)."),
         index: Path = typer.Option(..., help="Index folder written by the index stage."),
         tune: Path = typer.Option(..., help="Folder with the tune stage's selection.json."),
         memory: Path = typer.Option(..., help="Memory folder written by the memory stage (RAE's input keys)."),
         out: Path = typer.Option(..., help="Model folder to write."),
         params: Path = typer.Option(Path("params.yaml"), help="Parameters file.")) -> None:
    with tracked_stage("package", params) as (p, _):
        selection, b = read_selection(tune), p.infer.b
        settings = RaeSettings(selection.lam, selection.tau, b, selection.rae_retrieval)
        # the package's version, not the git commit: a commit in the folder would change it at every commit, and a
        # fresh clone's repro could not give the lock's bytes back (the MLflow run carries the commit)
        about = {"dataset": dataset.name, "raexmc": raexmc.__version__,
                 "metrics": {f"validation {selection.metric} (tune stage)": selection.val_value},
                 "selection": {"metric": selection.metric, "lambda": selection.lam, "tau": selection.tau,
                               "retrieval": selection.retrieval, "val_queries": selection.val_queries,
                               "knn_tau": selection.knn_tau}}  # the τ kNN, a baseline of its indexes, is scored at
        encoder = TextEncoder.load(model, "cpu", p.embed.precision, p.tokenize.input_max_len, stage_output=True)
        package_model(out, Dataset(dataset), encoder, index, memory, embeddings, settings,
                      relevance=p.infer.relevance, input_fields=p.tokenize.input_fields, backend=p.index.backend,
                      ef_search=p.infer.ef_search, about=about, threads=p.index.threads, M=p.index.M,
                      ef_construction=p.index.ef_construction)


if __name__ == "__main__":
    stage_cli(main, __doc__)
