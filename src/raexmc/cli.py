"""The `raexmc` command: look at datasets and presets, predict with and serve a built pipeline, score any
system's predictions (the pipeline itself runs with `dvc repro`)."""

from __future__ import annotations

from .numerics import pin_cpu_kernels

pin_cpu_kernels()  # first, as in a stage: a model's vectors and scores are then the stages' bits

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from .pipeline.tracking.stage import user_errors
from .settings import QUERY_THREADS, load_settings

if TYPE_CHECKING:
    from .evaluation.propensity import Propensity

# rich_markup_mode None: click's help names a flag alone (typer's rich help gives every flag, --help too, "<bool>")
app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  context_settings={"max_content_width": 120},  # click wraps at 80 columns otherwise
                  help="RAE-XMC: extreme multi-label classification with retrieval-augmented encoders. "
                       "Run the pipeline with `dvc repro`; these commands inspect its datasets and presets "
                       "and predict with (or serve) what it built.")


def _version(shown: bool) -> None:
    if shown:
        from importlib.metadata import version

        typer.echo(f"raexmc {version('raexmc')}")
        raise typer.Exit()


@app.callback()
def main(show_version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                           help="Print the installed version and exit.")) -> None:
    """Options of `raexmc` itself, before a command."""


PARAMS = typer.Option(Path("params.yaml"), help="Parameters file.")
NAME = typer.Option(None, help="Dataset whose pipeline outputs to use (default: data.name in params.yaml).")
DATA_DIR = typer.Option(Path("data"), help="Where datasets are built.")
ARTIFACTS = typer.Option(Path("artifacts"), help="Where the pipeline's outputs are.")


@app.command()
def datasets(params: Path = PARAMS, data_dir: Path = DATA_DIR) -> None:
    """List the datasets of the catalogue (datasets/<name>.yaml beside params.yaml), their source, and their size
    once built."""
    with user_errors(params):
        from .data.catalogue import catalogue, catalogue_dir

        rows = []
        for name, spec in catalogue(catalogue_dir(params)).items():
            stats_path, built = data_dir / name / "stats.json", "not built"
            if stats_path.is_file():
                stats = json.loads(stats_path.read_text())
                built = f"N_train={stats['N_train']} N_test={stats['N_test']} L={stats['L']}"
            rows.append((name, str(spec.get("source", "?")), built))
        widths = [max(len(row[column]) for row in rows) for column in (0, 1)]  # columns as wide as their longest
        for name, source, built in rows:
            typer.echo(f"{name:<{widths[0]}}  {source:<{widths[1]}}  {built}")


@app.command()
def show(name: str = typer.Argument(..., help="Dataset name, e.g. foldoc."), data_dir: Path = DATA_DIR) -> None:
    """Print stats.json and source.json of a built dataset."""
    with user_errors():
        from .data.dataset import Dataset

        dataset = Dataset(data_dir / name)
        typer.echo(json.dumps({"stats": dataset.stats, "source": dataset.source}, indent=2))


@app.command()
def schema(out: Path = typer.Option(None, help="File to write (default: stdout), e.g. params.schema.json.")) -> None:
    """The JSON Schema of params.yaml, from the settings' types: editors that read it complete and check the keys
    (params.yaml's first line points YAML language servers at params.schema.json)."""
    from .settings import schema_text

    if out is None:
        typer.echo(schema_text(), nl=False)
    else:
        out.write_text(schema_text(), encoding="utf-8")


@app.command()
def preset(name: str = typer.Argument(..., help="Preset name, e.g. LF-AmazonTitles-131K."), params: Path = PARAMS,
           data_dir: Path = DATA_DIR,
           gpus: int = typer.Option(None, help="Train on this many GPUs with the paper's global batch (gradient "
                                               "caching keeps each GPU's part in its memory).")) -> None:
    """Print the `dvc exp run` command that runs one of the paper's benchmarks in the paper's setting, after
    comment lines on its batch and on what it needs that this machine lacks (weights, data)."""
    with user_errors(params):
        from .pipeline.presets import batch_note, command, missing, on_gpus, preset_values, presets_path

        values = preset_values(presets_path(params), name)
        note = batch_note(values)  # the paper's batch, before --gpus shares it out
        if gpus is not None:
            values = on_gpus(values, gpus, presets_path(params), name)
        needs = missing(values, params, data_dir)
        if note:
            typer.echo(f"# {note}")
        typer.echo("# missing here: " + "; ".join(needs) if needs else "# missing here: nothing")
        typer.echo(command(values))


def _read_queries(texts: list[str] | None, file: Path | None, jsonl: bool) -> list:
    """The queries of the arguments, the file or stdin (read as bytes: a line not UTF-8 is named in any locale)."""
    from .errors import DataError
    from .rae.queries import checked_text, parse_queries, utf8_lines

    if texts:
        return [checked_text(text, "<arguments>", number) for number, text in enumerate(texts, start=1)]
    if file is not None:
        if not file.is_file():
            raise DataError("query file not found", file)
        with file.open("rb") as handle:
            queries = parse_queries(utf8_lines(handle, str(file)), str(file), jsonl or file.suffix == ".jsonl")
    elif sys.stdin.isatty():
        raise DataError("no queries: give texts as arguments, --file, or pipe them on stdin")
    else:
        queries = parse_queries(utf8_lines(sys.stdin.buffer, "<stdin>"), "<stdin>", jsonl)
    if not queries:  # as the server refuses a request with no query, rather than answer nothing
        raise DataError("no query: the input has no non-blank line", file or "<stdin>")
    return queries


@app.command()
# TEXT's own help row would read "TEXT <list[str]>": the usage line and the docstring name it instead
def predict(texts: list[str] = typer.Argument(None, metavar="TEXT", hidden=True),
            file: Path = typer.Option(None, "--file", "-f",
                                      help="Queries, one per line; JSON lines if it ends .jsonl."),
            jsonl: bool = typer.Option(False, help='Read JSON lines with "text" (or "title"/"content").'),
            k: int = typer.Option(None, "--top-k", "-k", min=1,
                                  help="Labels per query (default 10, or every label of a smaller model)."),
            model: Path = typer.Option(None, "--model", "-m",
                                       help="A saved model folder (default: <artifacts>/<name>/predictor)."),
            name: str = NAME, artifacts: Path = ARTIFACTS,
            batch_size: int = typer.Option(32, min=1, help="Queries encoded and searched together."),
            device: str = typer.Option("auto", help="auto | cpu | cuda | cuda:N"),
            threads: int = typer.Option(QUERY_THREADS, min=0, help="CPU threads the queries run on (0: every "
                                                                   "CPU; more help long files on an idle machine)."),
            verbose: bool = typer.Option(False, "--verbose", "-v", help="Load time and per-query latency on stderr."),
            scores_out: Path = typer.Option(None, help="In place of the JSON lines: every query's top-100 label "
                                                       "scores as a score file (.npz; raexmc evaluate --scores)."),
            params: Path = PARAMS) -> None:
    """Top-k labels, with scores and label texts, as one JSON line per query on stdout, for each TEXT (none: the
    queries of --file or stdin); or with --scores-out, the score matrix of all of them."""
    with user_errors(params):
        from .encoder.device import pick_device
        from .memory.hnsw import resolve_threads
        from .rae.model import RaeModel, Timing

        queries = _read_queries(texts, file, jsonl)
        folder = model or artifacts / (name or load_settings(params).data.name) / "predictor"
        started = time.perf_counter()
        rae = RaeModel.load(folder, pick_device(device, "<arguments>", "--device"), resolve_threads(threads))
        if verbose:
            typer.echo(f"loaded {folder} in {time.perf_counter() - started:.2f} s", err=True)
        if scores_out is not None:
            _write_text_scores(rae, queries, batch_size, scores_out)
            return
        k = k or min(10, rae.num_labels)
        total = Timing()
        for start in range(0, len(queries), batch_size):
            batch = queries[start:start + batch_size]
            results, timing = rae.predict(batch, k)
            for query, labels in zip(batch, results):
                typer.echo(json.dumps({"text": rae.query_text(query), "labels": labels}, ensure_ascii=False))
            total.add(timing)
            if verbose:
                typer.echo(_latency_line(f"queries {start + 1}-{start + len(batch)}", timing), err=True)
        if verbose and queries:
            typer.echo(_latency_line(f"all {len(queries)} queries", total), err=True)


def _write_text_scores(rae, queries: list, batch_size: int, out: Path) -> None:
    """The queries' score file (each row's top-100 labels), written atomically as the evaluate stage writes its own."""
    from .evaluation.evaluator import RANK_DEPTH
    from .evaluation.score_file import TopScores, save_scores
    from .io import atomic_file
    from .rae.ranking import top_k

    top = TopScores(rae.num_labels)
    for start in range(0, len(queries), batch_size):
        texts = [rae.query_text(query) for query in queries[start:start + batch_size]]
        scores = rae.scores_for(rae.encoder.embed_texts(texts))
        top.add(top_k(scores, RANK_DEPTH), scores)
    with atomic_file(out, "wb") as handle:
        save_scores(handle, top.matrix())


def _latency_line(what: str, timing) -> str:
    ms = timing.per_query_ms()
    return (f"{what}: {ms['total']:.1f} ms/query (encode {ms['encode']:.1f}, search {ms['search']:.1f}, "
            f"score {ms['score']:.1f})")


@app.command()
def serve(name: str = NAME,
          alias: str = typer.Option(None, help="Registered model alias (default: package.alias in params.yaml)."),
          host: str = typer.Option("127.0.0.1", help="Address to listen on."),
          port: int = typer.Option(5001, min=1, max=65535, help="Port to listen on."),
          max_body_bytes: int = typer.Option(1 << 20, min=1, help="Largest request body read (larger: 413)."),
          max_records: int = typer.Option(1000, min=1, help="Most records in one request (more: 400)."),
          threads: int = typer.Option(QUERY_THREADS, min=0, help="CPU threads the model scores on (0: every "
                                                                 "CPU); concurrent requests are scored together. "
                                                                 "An int8 model encodes that many texts at once."),
          params: Path = PARAMS) -> None:
    """Serve the registered predictor over HTTP (MLflow's scoring server, each request checked first). The
    default limits keep one request well inside MLflow's 60 s scoring timeout on 2 cores (docs/reliability.md)."""
    with user_errors(params):
        from .memory.hnsw import resolve_threads
        from .pipeline.server import serve_model
        from .pipeline.serving import registered_name, registered_uri

        settings = load_settings(params)
        model_name = registered_name(settings.package, name or settings.data.name)
        uri = registered_uri(model_name, alias or settings.package.alias)
        typer.echo(f"serving {uri} on http://{host}:{port}/invocations", err=True)
        serve_model(uri, host, port, max_body_bytes, max_records, resolve_threads(threads))


@app.command()
def results(name: str = NAME, artifacts: Path = ARTIFACTS, params: Path = PARAMS,
            exp: list[str] = typer.Option(None, "--exp", metavar="NAME",
                                          help="A DVC experiment to set beside the others (its committed results); "
                                               "repeat for more."),
            rev: list[str] = typer.Option(None, "--rev", metavar="REV", help="A git revision (or `workspace`) to set "
                                                                            "beside the others; repeat for more."),
            as_json: bool = typer.Option(False, "--json", help="Print the runs as JSON (p-values as numbers, "
                                                                "their log10 beside them).")) -> None:
    """Key metrics per method and RAE's paired t-tests: a readable `dvc metrics show`. With --exp or --rev, runs side
    by side (experiments first, then revisions, each in the order given): the headline metrics, the λ and τ the
    tune stage chose, and the tests' mean differences and p-values, within 120 columns."""
    with user_errors(params):
        from .pipeline.results import WORKSPACE, runs_of, side_by_side, summary

        if not exp and not rev and not as_json:
            folder = artifacts / (name or load_settings(params).data.name)
            typer.echo(summary(folder / "eval", folder / "significance.json", folder / "tune" / "selection.json"))
            return
        runs = runs_of(params.resolve().parent, exp or [], rev or ([] if exp else [WORKSPACE]), artifacts, name)
        typer.echo(json.dumps({"runs": [run.as_json() for run in runs]}, indent=2) if as_json else side_by_side(runs))


def _propensity_pair(value: str) -> Propensity | None:
    """`--propensity`: auto (None: the dataset's pair) or "A,B"."""
    from .evaluation.propensity import Propensity

    if value == "auto":
        return None
    try:
        A, B = (float(part) for part in value.split(","))
    except ValueError:
        raise typer.BadParameter(f"expected auto or A,B (two numbers), got {value!r}") from None
    if not (A > 0 and B > 0):
        raise typer.BadParameter(f"A and B must be > 0, got {value!r}")
    return Propensity(A, B, "--propensity", "--propensity")


@app.command()
def evaluate(dataset: Path = typer.Option(..., help="Dataset: the download stage's folder (data/<name>) or a folder "
                                                     "in the LF or NGAME layout."),
             scores: Path = typer.Option(None, help="Test-set top-k scores: an N_test x L scipy.sparse .npz (pyxclib, "
                                                    "PECOS), at most 100 scores a row."),
             model: Path = typer.Option(None, "--model", "-m", help="In place of --scores: a packaged model folder, "
                                                                    "scored as the evaluate stage scores it."),
             compare: Path = typer.Option(None, help="With --scores, another score file; with --model, another run's "
                                                     "per_instance.npz: paired t-tests against it."),
             out: Path = typer.Option(None, help="Write the metrics (and tests) as JSON here."),
             scores_out: Path = typer.Option(None, help="With --model: each method's score file, <method>.npz, in this "
                                                        "folder, or RAE's alone to a path ending .npz."),
             per_instance: Path = typer.Option(None, help="With --model: the per-instance metrics, as the stage's "
                                                          "per_instance.npz."),
             propensity: str = typer.Option("auto", help="PSP@k's A,B, or auto: the dataset's pair "
                                                         "(docs/propensity.md)."),
             params: Path = typer.Option(Path("params.yaml"), help="With --model: the parameters of its evaluation "
                                                                   "(sweeps, embed and search settings).")) -> None:
    """Score any system's predictions (--scores) or a packaged model (--model) as the evaluate stage scores its own:
    P@k, nDCG@k, PSP@k, R@k and macro-F1@5 by segment, after the dataset's reciprocal-pair filter; with --compare,
    paired t-tests of the key metrics (a model's also against its baselines, as the significance stage tests)."""
    pair = _propensity_pair(propensity)
    with user_errors(params if model is not None else None):
        from .errors import ConfigError
        from .evaluation.score_report import report_table, score_files
        from .io import write_json
        from .pipeline.results import KEY_METRICS

        if (scores is None) == (model is None):
            raise ConfigError("give one of --scores (a score file) and --model (a model folder)")
        if model is None:
            report = score_files(dataset, scores, compare, KEY_METRICS, pair)
            typer.echo(report_table(report))
        else:
            report = _evaluate_model(model, dataset, compare, scores_out, per_instance, pair, params)
        if out is not None:
            write_json(out, report)


def _evaluate_model(folder: Path, dataset: Path, compare: Path | None, scores_out: Path | None,
                    per_instance: Path | None, pair: Propensity | None, params: Path) -> dict:
    """`raexmc evaluate --model`: the folder measured, its table and tests printed, files written where asked."""
    import numpy as np

    from .evaluation.model_search import evaluate_folder, per_instance_arrays
    from .evaluation.score_report import opened_dataset, report_table
    from .evaluation.significance import compare_runs, load_per_instance, significance_lines
    from .io import atomic_file
    from .pipeline.evaluation_folder import write_scores

    p = load_settings(params)
    with opened_dataset(dataset) as data:
        metrics, result = evaluate_folder(folder, data, p, pair, keep_scores=scores_out is not None)
    arrays = per_instance_arrays(result["per_instance"])
    other = None if compare is None else load_per_instance(compare)
    tests = compare_runs(arrays, list(p.significance.metrics), other, "--model", compare)
    typer.echo("\n".join([report_table(metrics, list(result["per_instance"]), {}), *significance_lines(tests)]))
    if scores_out is not None:
        write_scores(scores_out, result["scores"])
    if per_instance is not None:
        with atomic_file(per_instance, "wb") as handle:
            np.savez_compressed(handle, **arrays)
    return {**metrics, "significance": tests}


@app.command()
def sweep(overrides: list[str] = typer.Option(..., "--set-param", "-S", metavar="KEY=V1,V2,...",
                                             help="key=v1,v2,...; repeat for a grid, "
                                                  "e.g. -S infer.lambda=0,0.5,1 -S infer.b=50,200."),
          jobs: int = typer.Option(1, "--jobs", "-j", min=1, help="Experiments run at once (DVC queue workers)."),
          ui: str = typer.Option("http://127.0.0.1:5000",
                                 help="Where `mlflow ui` listens, for the compare link.")) -> None:
    """Run a grid of `dvc exp run --queue` experiments, wait, and compare them (dvc exp show + MLflow)."""
    with user_errors():
        from .pipeline.compare import compare_url
        from .pipeline.sweep import baseline, run_sweep, show_command, swept_keys
        from .pipeline.tracking.identity import project_root

        keys, root, seen = swept_keys(overrides), project_root(), {}

        def report(states: dict[str, str]) -> None:
            counts = {state: list(states.values()).count(state) for state in sorted(set(states.values()))}
            if counts != seen:
                seen.clear()
                seen.update(counts)
                typer.echo("sweep: " + ", ".join(f"{n} {state.lower()}" for state, n in counts.items()), err=True)

        commit = baseline(root)
        names = run_sweep(overrides, jobs, root, report=report)
        subprocess.run(show_command(keys, commit), cwd=root, check=False)
        typer.echo(f"\nMLflow compare view (with `mlflow ui --backend-store-uri sqlite:///mlflow.db` running):\n"
                   f"{compare_url(names, ui)}")


if __name__ == "__main__":
    app()
