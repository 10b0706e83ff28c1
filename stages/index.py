"""Build the memory's indexes, every key once: one of the training inputs (kNN) and one of the labels (the
dual encoder), merged for RAE's joint search (memory/indexes.py; `index.backend` auto: exact on a GPU and up to
EXACT_MAX_KEYS keys, where an index is only its metadata).
"""

from raexmc.numerics import pin_cpu_kernels

pin_cpu_kernels()  # first: NumPy and PyTorch choose their CPU kernels as they load (docs/reproducibility.md)

from pathlib import Path

import typer

from raexmc.memory.indexes import backend_for, build_memory_indexes, search_device
from raexmc.pipeline.tracking.stage import stage_cli, tracked_stage


def main(embeddings: Path = typer.Option(..., help="Embeddings folder written by the embed stage."),
         out: Path = typer.Option(..., help="Index folder to write (inputs/ and labels/)."),
         params: Path = typer.Option(Path("params.yaml"), help="Parameters file.")) -> None:
    with tracked_stage("index", params) as (p, run):
        backend = backend_for(p.index.backend, embeddings, search_device(p.search))
        run.params({"index": {**p.index.model_dump(), "backend_used": backend}, "search": p.search.model_dump()})
        built = build_memory_indexes(embeddings, out, backend, M=p.index.M, ef_construction=p.index.ef_construction,
                                     threads=p.index.threads, uri=p.index.uri, token_env=p.index.token_env,
                                     index_type=p.index.milvus_index)
        run.metrics({f"{key_set}/{name}": value for key_set, values in built.items() for name, value in values.items()})


if __name__ == "__main__":
    stage_cli(main, __doc__)
