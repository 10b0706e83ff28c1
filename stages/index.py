"""Build the nearest-key index over the knowledge memory K = [training inputs; labels]
(HNSW by inner product on normalised embeddings, or exact search), saved with what reloads it."""

import time
from pathlib import Path

import typer

from raexmc.index import make_index, save_index
from raexmc.memory import memory_keys
from raexmc.stage import run_stage, stage_cli


def main(embeddings: Path = typer.Option(..., help="Embeddings folder written by the embed stage."),
         out: Path = typer.Option(..., help="Index folder to write."),
         params: Path = typer.Option(Path("params.yaml"), help="Parameters file.")) -> None:
    def body(p, run) -> None:
        run.params({"index": p.section("index")})
        keys = memory_keys(embeddings)
        started = time.perf_counter()
        index = make_index(p.typed("index.backend", str), keys, M=p.typed("index.M", int),
                           ef_construction=p.typed("index.ef_construction", int), threads=p.typed("index.threads", int))
        build_s = time.perf_counter() - started
        save_index(index, out)
        run.metrics({"build_s": round(build_s, 2), "keys": len(keys)})

    run_stage("index", body, str(params))


if __name__ == "__main__":
    stage_cli(main, __doc__)
