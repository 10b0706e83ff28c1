"""The encoder on a CPU beside its anchors, in one run: texts/s of the project's two paths, of
sentence-transformers' own `encode()` on the same model folder, and the share of the CPU's fp32 matrix-multiply
ceiling each reaches (torch.mm of the encoder's linear layers' shapes at the same batch, in the same process).

- The embed stage's path: the texts tokenised, then length-sorted batches of the batch size through
  TextEncoder.embed, on native kernels and on the pinned ones every stage uses (raexmc.numerics), in fp32 and bf16
  (the cost of the pin); and on native kernels in int8, by ONNX Runtime (embed.precision int8,
  raexmc.encoder.int8) and by PyTorch's dynamic quantisation (the option int8 was chosen over).
- Predict's path: `RaeModel.predict`'s encoder call, TextEncoder.embed_texts, in fp32, on requests of the batch
  size (the texts in their order, lengths mixed), each tokenised and encoded in its own length-sorted batches of
  TEXT_TOKENS. encode(), the anchor of both, gets the same requests, each at batch_size ST_BATCH (encode sorts a
  request by length itself).

    python bench/cpu_encoder_speed.py run --dataset data/foldoc --rounds 3 --out bench/results/cpu_encoder_speed.json

Texts are the dataset's first --count test inputs at their real lengths (cut at 128 tokens) and the same texts
cut at 32 (title-length), at batch 1 (64 of them), 32 and 384, with 1 and 2 threads. The libraries choose their
kernels as they load, so each kernel setting is measured in a child process of its own.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import typer

from common import ROOT, machine, rerun_command

app = typer.Typer(add_completion=False)
SHAPES = {"real": 128, "title": 32}
ST_BATCH = 64  # encode()'s batch_size in issue 62's anchor (sentence-transformers' own default is 32)


def texts_of(dataset: Path, count: int) -> list[str]:
    from raexmc.data.dataset import Dataset

    return [" ".join(filter(None, (record.title, record.content)))
            for record in itertools.islice(Dataset(dataset).texts("test"), count)]


def rate(run, texts: list[str], seconds: float) -> float:
    """Texts/s of `run(texts)` repeated for about `seconds`, after one untimed pass."""
    run(texts)
    started, passes = time.perf_counter(), 0
    while passes == 0 or time.perf_counter() - started < seconds:
        run(texts)
        passes += 1
    return passes * len(texts) / (time.perf_counter() - started)


def ceiling(model, batch: int, tokens: int, seconds: float) -> float:
    """Texts/s if every linear layer's product ran as one fp32 torch.mm at this batch and width: the
    encoder's matrix work at the CPU's measured speed for those shapes (attention's own products left out)."""
    import torch

    shapes = [(module.in_features, module.out_features) for module in model.modules()
              if isinstance(module, torch.nn.Linear)]
    rows = batch * tokens
    pairs = [(torch.randn(rows, n_in), torch.randn(n_in, n_out)) for n_in, n_out in shapes]

    def one_pass(_: list[str]) -> None:
        for left, right in pairs:
            torch.mm(left, right)

    return rate(one_pass, ["x"] * batch, seconds)


def int8_options(model) -> dict[str, object]:
    """The CPU's int8 options on the same weights: ONNX Runtime's (the project's embed.precision int8, its model
    quantised once here) and PyTorch's dynamic quantisation of the Linear layers (the one it was chosen over)."""
    import copy

    import torch

    from raexmc.encoder.int8 import quantized_bytes

    return {"onnx": quantized_bytes(model),
            "torch": torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), {torch.nn.Linear}, dtype=torch.qint8)}


def requests(texts: list[str], batch: int) -> list[list[str]]:
    """The texts in calls of `batch`, in their order (lengths mixed, as a server's requests come)."""
    return [texts[start:start + batch] for start in range(0, len(texts), batch)]


@app.command()
def measure(model: Path, texts_file: Path, kernels: str = "native", seconds: float = 3.0,
            batch_sizes: str = "1,32,384", threads: str = "1,2", precisions: str = "fp32,bf16,int8,torch_int8",
            predict: bool = True, st_batch: int = ST_BATCH, rounds: int = 1) -> None:
    """One kernel setting (the parent set its environment), in this process: prints one JSON row per measurement.
    The int8 options run in the native setting only (ONNX Runtime has its own kernels; the pin is torch's).
    `precisions` picks the embed path's columns (e.g. int8 alone beside encode(), when a loaded CPU has no time
    for the slow ones), `predict` whether predict's path runs; with `rounds` above 1 each column is the best of
    that many turns, taken in turn."""
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    from raexmc.encoder.int8 import Int8Encoder
    from raexmc.encoder.text_encoder import TextEncoder, batch_tensors

    all_texts = json.loads(texts_file.read_text())
    wants_int8 = kernels == "native" and {"int8", "torch_int8"} & set(precisions.split(","))
    int8 = int8_options(TextEncoder.load(model, "cpu", "fp32").model) if wants_int8 else {}
    for shape, max_len in SHAPES.items():
        reference = SentenceTransformer(str(model), device="cpu")
        reference.max_seq_length = max_len
        for batch, n_threads in itertools.product(map(int, batch_sizes.split(",")), map(int, threads.split(","))):
            torch.set_num_threads(n_threads)
            texts = all_texts[:64] if batch == 1 else all_texts
            row = {"kernels": kernels, "shape": shape, "max_len": max_len, "batch": batch, "threads": n_threads,
                   "texts": len(texts), "st_batch": st_batch, "capability": torch.backends.cpu.get_cpu_capability()}
            fp32 = TextEncoder.load(model, "cpu", "fp32", max_len=max_len)
            embedders = {"fp32": fp32.embed, "bf16": TextEncoder.load(model, "cpu", "bf16", max_len=max_len).embed}
            if int8:
                onnx = Int8Encoder(int8["onnx"], n_threads)
                embedders["int8"] = lambda ids, lengths, rows: onnx(*batch_tensors(ids, lengths, rows, "cpu"))
                embedders["torch_int8"] = TextEncoder(int8["torch"], "cpu", "fp32", fp32.tokenizer, max_len).embed
            columns = {}
            for precision, embed in [(name, embed) for name, embed in embedders.items()
                                     if name in precisions.split(",")]:

                def project(chunk: list[str], embed=embed) -> None:
                    ids, lengths = fp32.tokenize(chunk)
                    order = np.argsort(-lengths, kind="stable")
                    for start in range(0, len(order), batch):
                        embed(ids, lengths, order[start:start + batch])

                columns[f"project_{precision}"] = project
            if predict:
                columns["predict_fp32"] = lambda chunk: [fp32.embed_texts(request)
                                                         for request in requests(chunk, batch)]
            if kernels == "native":
                columns["sentence_transformers"] = lambda chunk: [
                    reference.encode(request, batch_size=st_batch, convert_to_numpy=True)
                    for request in requests(chunk, batch)]
            for _ in range(rounds):  # the columns in turn, each round: a load that comes and goes hits them alike
                for name, column in columns.items():
                    row[name] = max(row.get(name, 0.0), rate(column, texts, seconds))
            if kernels == "native":
                width = int(np.mean(fp32.tokenize(texts)[1]))
                row["ceiling_fp32"] = ceiling(reference, batch, width, seconds)
            print(json.dumps(row), flush=True)


@app.command()
def run(dataset: Path = typer.Option(Path("data/foldoc"), help="A dataset folder the download stage wrote."),
        model: str = typer.Option("all-MiniLM-L6-v2", help="Encoder name or folder (sentence-transformers layout)."),
        count: int = typer.Option(384, help="Test texts to take."),
        seconds: float = typer.Option(3.0, help="Seconds per measurement."),
        batch_sizes: str = typer.Option("1,32,384", help="Batches (and predict's request sizes) to measure."),
        threads: str = typer.Option("1,2", help="Thread counts to measure."),
        precisions: str = typer.Option("fp32,bf16,int8,torch_int8", help="The embed path's precisions."),
        rounds: int = typer.Option(1, help="Each column the best of this many turns, taken in turn."),
        out: Path = typer.Option(ROOT / "bench/results/cpu_encoder_speed.json", help="Record to write.")) -> None:
    """Every kernel setting in a child process; one record with every column."""
    from raexmc.encoder.model import resolve_encoder
    from raexmc.numerics import PINNED_KERNELS

    folder = Path(resolve_encoder(model))
    before = machine()
    texts_file = out.with_suffix(".texts.json")
    texts_file.write_text(json.dumps(texts_of(dataset, count)))
    rows = []
    try:
        for kernels, env in (("native", {}), ("pinned", PINNED_KERNELS)):
            child = subprocess.run([sys.executable, __file__, "measure", str(folder), str(texts_file),
                                    "--kernels", kernels, "--seconds", str(seconds), "--batch-sizes", batch_sizes,
                                    "--threads", threads, "--precisions", precisions, "--rounds", str(rounds)],
                                   capture_output=True, text=True, check=True, env={**os.environ, **env})
            rows += [json.loads(line) for line in child.stdout.splitlines() if line.startswith("{")]
    finally:
        texts_file.unlink()
    native = {(r["shape"], r["batch"], r["threads"]): r for r in rows if r["kernels"] == "native"}
    for row in rows:
        anchor = native[row["shape"], row["batch"], row["threads"]]
        for column in [key for key in list(row) if key.startswith(("project_", "predict_"))]:
            row[f"{column}_vs_st"] = row[column] / anchor["sentence_transformers"]
            row[f"{column}_of_ceiling"] = row[column] / anchor["ceiling_fp32"]
    out.write_text(json.dumps({"command": rerun_command(), "model": model, "dataset": str(dataset),
                               "machine_before": before, "machine_after": machine(), "rows": rows}, indent=1) + "\n")
    for row in rows:
        columns = [key for key in row if f"{key}_vs_st" in row]
        print(f"{row['kernels']:7} {row['shape']:5} batch {row['batch']:3} threads {row['threads']}: "
              + ", ".join(f"{column} {row[column]:7.1f}/s ({row[column + '_vs_st']:.2f}x ST)" for column in columns))


if __name__ == "__main__":
    app()
