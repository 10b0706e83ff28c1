"""Predict's speed on one packaged project: its throughput with the paper's joint top-b against the split
retrieval (whether choosing `infer.retrieval: split` costs the user time per query), and with --latency the time
one short query takes at batch 1 in `raexmc predict`, then in `raexmc serve` under concurrent clients.

    python bench/predict_speed.py --name foldoc [--queries 1024 --batch-size 64 --repeats 3 --shares 0.25,0.5,0.75]
    python bench/predict_speed.py --name foldoc --latency [--tokens 32 --queries 60 --clients 16 --seconds 30 \
        --serve-threads 1,2 --rounds 2]

Loads artifacts/<name>/predictor as `raexmc predict` does (RaeModel.load), takes the first --queries test texts of
data/<name>, and runs RaeModel.predict over them in batches for the packaged model's own settings and for the
split retrieval at each share (the same memory, λ, τ and b; only the retrieval changes). The variants take turns
within each of --repeats passes, so that a busy machine slows them alike; each keeps its fastest pass. Writes
bench/results/predict_speed_<name>.json: per variant queries/s and the encode, search and score milliseconds per
query (rae/model.py's Timing, the split of predict).

With --latency it appends one row to bench/results/predict_latency_<name>.json: per variant (fp32 and int8, each
with 1 and 2 torch threads) the p50/p90/p99 milliseconds of RaeModel.predict on one
query, the test texts cut to --tokens tokens; on one thread, its split into encode, search and score beside
the floor (the encoder at the CPU's matrix-multiply ceiling), and the cost per query of 1 against 16 queries a
call; then `raexmc serve`'s own server (serve_model, on 127.0.0.1 only) answering --clients threads that each
post one such query at a time for --seconds: requests/s, errors, and the latency percentiles the clients saw.
A server runs per precision (the packaged fp32 model, and the same model with its encoder at int8) and per
--serve-threads setting, the load going to each in turn for --rounds rounds (torch's default on 2 cores was 2
threads: the setting before QUERY_THREADS). The row names the CPU and the machine's load, which moves every
figure.
"""

from __future__ import annotations

import dataclasses
import http.client
import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import typer

from common import ROOT, append_row, machine, rerun_command
from cpu_encoder_speed import ceiling
from raexmc.data.dataset import Dataset
from raexmc.memory.merge import RaeRetrieval
from raexmc.rae.model import RaeModel, Timing


def measure(packaged: RaeModel, texts: list[str], shares: list[float], batch_size: int, repeats: int,
            k: int = 10) -> dict[str, dict[str, float]]:
    """Per variant ("packaged": the model as packaged; "split <share>"), its fastest pass of `repeats`, each asking
    for the top k labels (at most all of them)."""
    k = min(k, packaged.num_labels)  # as `raexmc predict` takes its default
    variants = {"packaged": packaged, **{f"split {share:g}": packaged.at(retrieval=RaeRetrieval("split", share))
                                         for share in shares}}
    best: dict[str, Timing] = {}
    for _, (name, model) in itertools.product(range(repeats), variants.items()):
        timing = Timing()  # one pass of predict over the texts, batch by batch, its time split as predict splits it
        for start in range(0, len(texts), batch_size):
            timing.add(model.predict(texts[start:start + batch_size], k)[1])
        if name not in best or timing.per_query_ms()["total"] < best[name].per_query_ms()["total"]:
            best[name] = timing
    return {name: {"queries_per_s": round(1000 / t.per_query_ms()["total"], 1),
                   **{f"{part}_ms_per_query": round(ms, 3) for part, ms in t.per_query_ms().items()}}
            for name, t in best.items()}


def cut_to_tokens(model: RaeModel, texts: list[str], tokens: int) -> list[str]:
    """Each text cut at a word piece's end so that the encoder sees at most `tokens` tokens, its special ones
    counted (a short query, as a user types it)."""
    tokenizer = model.encoder.tokenizer
    special = len(model.encoder.tokenize([""])[0][0])  # [CLS] and [SEP], or whatever the tokenizer adds
    cut = []
    for text in texts:
        pieces = [end for start, end in tokenizer(text, return_offsets_mapping=True)["offset_mapping"] if end > start]
        cut.append(text[:pieces[min(tokens - special, len(pieces)) - 1]] if pieces else text)
    return cut


def percentiles(seconds: list[float]) -> dict[str, float]:
    p50, p90, p99 = np.percentile(np.asarray(seconds) * 1000, [50, 90, 99])
    return {"p50_ms": round(float(p50), 2), "p90_ms": round(float(p90), 2), "p99_ms": round(float(p99), 2)}


def at_int8(model: RaeModel) -> RaeModel:
    """The model with its encoder at int8 (built now, on torch's thread setting): the same memory, so its answers
    are not an int8 run's, but each query costs what it costs in one."""
    from raexmc.encoder.text_encoder import TextEncoder

    fp32 = model.encoder
    return dataclasses.replace(model, encoder=TextEncoder(fp32.model, "cpu", "int8", fp32.tokenizer, fp32.max_len))


def batch_one_latency(model: RaeModel, texts: list[str], k: int) -> dict[str, dict[str, float]]:
    """Per variant (precision x torch threads), the percentiles of RaeModel.predict on one query at a time (after
    one warm-up query each). fp32 and int8 take turns query by query, so that a busy machine slows them alike; the
    thread settings run one after the other, since two threads still spin for a while after a call and would slow
    a one-thread call that follows."""
    import torch

    measured: dict[str, dict[str, float]] = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)  # an int8 encoder takes torch's thread setting when it is built
        int8 = at_int8(model)
        times: dict[str, list[float]] = {"fp32": [], "int8": []}
        for text, (precision, variant) in itertools.product(texts[:1] + texts, (("fp32", model), ("int8", int8))):
            started = time.perf_counter()
            variant.predict([text], k)
            times[precision].append(time.perf_counter() - started)
        measured.update({f"{precision} {threads} thread": percentiles(seconds[1:])
                         for precision, seconds in times.items()})
    return measured


def one_thread_floor(model: RaeModel, texts: list[str], k: int, tokens: int) -> dict[str, float]:
    """Where a one-query call's time goes on one thread (median ms of predict's encode, search and score over the
    texts), beside the floor: the encoder's linear layers at this CPU's torch.mm speed for one `tokens`-token
    text (cpu_encoder_speed.ceiling, attention left out) plus the search and score as measured."""
    import torch

    torch.set_num_threads(1)
    model.predict(texts[:1], k)  # warm-up
    phases = np.array([list(model.predict([text], k)[1].per_query_ms().values()) for text in texts])
    total, encode, search, score = (float(ms) for ms in np.median(phases, axis=0))
    encoder_ceiling = 1000 / ceiling(model.encoder.model, 1, tokens, seconds=3.0)
    floor = encoder_ceiling + search + score
    return {"total_ms": round(total, 2), "encode_ms": round(encode, 2), "search_ms": round(search, 2),
            "score_ms": round(score, 2), "encoder_matmul_ceiling_ms": round(encoder_ceiling, 2),
            "floor_ms": round(floor, 2), "total_over_floor": round(total / floor, 3)}


def shared_batch_cost(model: RaeModel, texts: list[str], k: int, size: int = 16, repeats: int = 3) -> dict[str, float]:
    """Milliseconds per query of RaeModel.predict on one thread, one query a call against `size` a call (what
    serve's shared batches buy), the two taking turns, each its fastest of `repeats` passes over the texts."""
    import torch

    torch.set_num_threads(1)
    best = {1: float("inf"), size: float("inf")}
    for _, batch in itertools.product(range(repeats), best):
        started = time.perf_counter()
        for start in range(0, len(texts), batch):
            model.predict(texts[start:start + batch], k)
        best[batch] = min(best[batch], (time.perf_counter() - started) * 1000 / len(texts))
    return {f"{batch} a call, ms per query": round(ms, 2) for batch, ms in best.items()}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def saved_pyfunc(predictor: Path, folder: Path) -> Path:
    """The predictor as the package stage logs it (serving.RaexmcModel around the model folder), saved to a
    new local `folder` that `serve_model` loads as it loads a registered one."""
    import mlflow

    from raexmc.pipeline.serving import SIGNATURE, RaexmcModel

    mlflow.pyfunc.save_model(folder, python_model=RaexmcModel(), artifacts={"model": str(predictor)},
                             signature=SIGNATURE)
    return folder


def start_server(pyfunc: Path, threads: int | None) -> tuple[subprocess.Popen, int]:
    """`raexmc serve`'s server (pipeline.server.serve_model) for `pyfunc` in its own process on 127.0.0.1, each
    request on `threads` CPU threads (None: serve_model's default, whatever the code under test has)."""
    port = free_port()
    extra = "" if threads is None else f", threads={threads}"
    code = f"from raexmc.pipeline.server import serve_model; serve_model({str(pyfunc)!r}, '127.0.0.1', {port}{extra})"
    server = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, start_new_session=True)
    wait_until_up(server, port)
    return server, port


def load_round(port: int, texts: list[str], clients: int, seconds: float, k: int) -> tuple[list[float], int, float]:
    """`clients` threads, each posting one query at a time on its own connection for `seconds`: the answered
    requests' latencies, the errors (any status but 200, or a failed connection) and the round's length."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors = [0] * clients
    stop = time.perf_counter() + seconds

    def client(number: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for text in itertools.cycle(texts[number::clients]):
            if time.perf_counter() >= stop:
                break
            body = json.dumps({"dataframe_records": [{"text": text}], "params": {"k": k}})
            started = time.perf_counter()
            try:
                connection.request("POST", "/invocations", body, {"Content-Type": "application/json"})
                response = connection.getresponse()
                response.read()
                ok = response.status == 200
            except OSError:
                ok = False
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            if ok:
                latencies[number].append(time.perf_counter() - started)
            else:
                errors[number] += 1
        connection.close()

    started = time.perf_counter()
    threads = [threading.Thread(target=client, args=(number,)) for number in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [seconds for answered in latencies for seconds in answered], sum(errors), time.perf_counter() - started


def serve_load(pyfuncs: dict[str, Path], texts: list[str], clients: int, seconds: float, k: int,
               settings: list[int | None], rounds: int) -> dict[str, dict[str, Any]]:
    """Per precision (its saved pyfunc) and thread setting of the server, one server, all up at once; the clients'
    load goes to each in turn for `rounds` rounds of seconds / rounds, so that a busy machine slows them alike. Per
    server: answered requests/s, errors, and the latency percentiles the clients saw."""
    servers = {f"{precision} {'default threads' if setting is None else f'{setting} thread'}":
               start_server(pyfunc, setting) for precision, pyfunc in pyfuncs.items() for setting in settings}
    try:
        seen: dict[str, tuple[list[float], int, float]] = {label: ([], 0, 0.0) for label in servers}
        for _, (label, (_, port)) in itertools.product(range(rounds), servers.items()):
            answered, errors, elapsed = load_round(port, texts, clients, seconds / rounds, k)
            before = seen[label]
            seen[label] = (before[0] + answered, before[1] + errors, before[2] + elapsed)
    finally:
        for server, _ in servers.values():
            server.terminate()
            server.wait(timeout=30)
    return {label: {"clients": clients, "seconds": round(elapsed, 1), "requests": len(answered) + errors,
                    "requests_per_s": round(len(answered) / elapsed, 1), "errors": errors, **percentiles(answered)}
            for label, (answered, errors, elapsed) in seen.items()}


def wait_until_up(server: subprocess.Popen, port: int, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2)
            return
        except OSError:
            if server.poll() is not None:
                raise RuntimeError(f"the server stopped: {server.stderr.read()[-2000:]}") from None
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server did not answer /ping in {timeout:.0f} s") from None
            time.sleep(0.5)


def latency(model: RaeModel, root: Path, name: str, texts: list[str], tokens: int, clients: int, seconds: float,
            tag: str, k: int, serve_threads: list[int | None], rounds: int) -> None:
    """The --latency row (see the module's docstring)."""
    k = min(k, model.num_labels)
    short = cut_to_tokens(model, texts, tokens)
    before = machine()
    floor = one_thread_floor(model, short, k, tokens)  # first: threads of a 2-thread call spin on after it
    predict = batch_one_latency(model, short, k)
    batched = shared_batch_cost(model, short[:48], k)
    with tempfile.TemporaryDirectory(prefix="raexmc-serve-bench-") as scratch:
        at_int8(model).save(Path(scratch) / "int8")
        pyfuncs = {"fp32": saved_pyfunc(root / "artifacts" / name / "predictor", Path(scratch) / "fp32"),
                   "int8": saved_pyfunc(Path(scratch) / "int8", Path(scratch) / "int8-pyfunc")}
        serve = serve_load(pyfuncs, short, clients, seconds, k, serve_threads, rounds)
    append_row(ROOT / "bench" / "results" / f"predict_latency_{name}.json", {
        "tag": tag, "command": rerun_command(), "dataset": name, "queries": len(short), "tokens": tokens, "k": k,
        "machine_before": before, "machine_after": machine(), "predict_batch_1": predict,
        "fp32_1_thread_breakdown": floor,
        "predict_one_thread_batched": batched, "serve": serve})


def main(name: str = "foldoc", root: Path = Path("."), queries: int = 1024, batch_size: int = 64, repeats: int = 3,
         shares: str = "0.25,0.5,0.75",
         latency_mode: bool = typer.Option(False, "--latency", help="Batch-1 and serve latency instead."),
         tokens: int = 32, clients: int = 16, seconds: float = 20.0, tag: str = "", k: int = 10,
         serve_threads: str = typer.Option("default", help="The servers' thread settings, comma-separated "
                                                            "(default: serve_model's own)."),
         rounds: int = 2) -> None:
    model = RaeModel.load(root / "artifacts" / name / "predictor")
    texts = [model.query_text(record) for record in itertools.islice(Dataset(root / "data" / name).texts("test"),
                                                                      queries)]
    if latency_mode:
        settings = [None if setting == "default" else int(setting) for setting in serve_threads.split(",")]
        latency(model, root, name, texts, tokens, clients, seconds, tag, k, settings, rounds)
        return
    settings = model.settings
    report: dict[str, Any] = {
        "dataset": name, "command": rerun_command(),
        "queries": len(texts), "batch_size": batch_size, "repeats": repeats, "cpus": os.cpu_count(),
        "packaged": {"retrieval": settings.retrieval.mode, "label_share": settings.retrieval.label_share,
                     "lambda": settings.lam, "tau": settings.tau,
                     "b": settings.b},
        "variants": measure(model, texts, [float(s) for s in shares.split(",")], batch_size, repeats),
    }
    out = root / "bench" / "results" / f"predict_speed_{name}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    typer.run(main)
