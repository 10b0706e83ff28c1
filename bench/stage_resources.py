"""Wall time and peak memory of every pipeline stage on one dataset, outside DVC.

    python bench/stage_resources.py --name wordnet [--stages download,tokenize]
    python bench/stage_resources.py --name foldoc -S encoder.mode=fine-tuned --tag fine-tuned-gpu --keep-eval

Runs each stage's command from dvc.yaml directly (so the numbers are the stage's own, and the
pipeline runs where DVC is not installed, e.g. an offline GPU machine), as DVC runs them where track is one of them
(DVC_STAGE set: each stage journals its MLflow logs, which track writes to the store), with a copy of
params.yaml whose data.name is NAME and whose keys are set by `-S key=value` as `dvc exp run -S`
sets them. CPU seconds are the stage's user + system time; peak memory is the largest resident set of the stage's
process tree (os.wait4), so no /usr/bin/time is needed; output bytes are the sizes of the stage's `outs` in
dvc.yaml; evaluate's entry also has the RAE search's queries/s, which the stage logs to MLflow alone
(scripts/results_table.py reads it here). Writes bench/results/stage_resources_<name>[_<tag>].json after every stage
(a long run keeps what it has measured if it is stopped; --out elsewhere), with the command that reproduces it, and
prints a Markdown table; with --keep-eval, also copies the run's eval outputs (metrics.json, per_instance.npz,
significance.json, the training curve, the params used) to bench/results/runs/<name>_<tag>/.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import typer
from ruamel.yaml import YAML

from common import ROOT, rerun_command
from raexmc.pipeline.compare import logged_figure

KEPT = ("eval/metrics.json", "eval/per_instance.npz", "significance.json", "curves/training_curve.json")


def dvc_stages() -> dict[str, dict]:
    return YAML(typ="safe").load((ROOT / "dvc.yaml").read_text())["stages"]


def stage_commands(name: str) -> dict[str, list[str]]:
    """Each stage's command, in an order DVC may run them: a stage after those whose outputs it reads."""
    specs, ordered = dvc_stages(), {}
    outs = {stage: [next(iter(o)) if isinstance(o, dict) else o for o in spec.get("outs", [])]
            for stage, spec in specs.items()}
    while len(ordered) < len(specs):
        for stage, spec in specs.items():
            needs = {other for other, paths in outs.items() for dep in spec.get("deps", []) for path in paths
                     if other != stage and (dep == path or dep.startswith(f"{path}/"))}
            if stage not in ordered and needs <= set(ordered):
                ordered[stage] = shlex.split(spec["cmd"].replace("${data.name}", name))
    return ordered


def output_bytes(stage: str, name: str) -> int:
    """Bytes on disk of the stage's `outs` (files, or every file under a folder)."""
    total = 0
    for out in dvc_stages()[stage].get("outs", []):
        path = ROOT / (next(iter(out)) if isinstance(out, dict) else out).replace("${data.name}", name)
        files = [path] if path.is_file() else [f for f in path.rglob("*") if f.is_file()]
        total += sum(f.stat().st_size for f in files)
    return total


def measure(command: list[str], env: dict[str, str]) -> dict[str, float]:
    """Run a command to its end, passing its stderr (progress bars, ETAs) through; its wall time, CPU time
    (user + system, all threads and children: unlike the wall time it hardly changes when other jobs share the
    cores) and the peak RSS of its process tree."""
    started = time.monotonic()
    proc = subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE, env={**os.environ, **env})
    tail = b""
    while chunk := os.read(proc.stderr.fileno(), 65536):
        sys.stderr.buffer.write(chunk)
        sys.stderr.flush()
        tail = (tail + chunk)[-3000:]
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{tail.decode(errors='replace')}")
    return {"wall_s": round(time.monotonic() - started, 1), "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
            "peak_rss_mb": round(usage.ru_maxrss / 1024, 1)}


def set_key(params: dict, assignment: str) -> None:
    """Apply one `key.sub=value` override; the value is parsed as YAML (true, 300, [0, 1])."""
    key, sep, value = assignment.partition("=")
    if not sep:
        raise typer.BadParameter(f"-S {assignment!r}: expected key=value")
    *parents, leaf = key.split(".")
    node = params
    for part in parents:
        node = node[part]
    node[leaf] = YAML(typ="safe").load(value)


def without_out(arguments: list[str]) -> list[str]:
    """The arguments less --out: the command a record keeps writes to its default place, where it is committed."""
    kept, skip = [], False
    for argument in arguments:
        if skip or argument.startswith("--out="):
            skip = False
            continue
        skip = argument == "--out"
        if not skip:
            kept.append(argument)
    return kept


def main(name: str = typer.Option("foldoc", help="Dataset (a file of datasets/, by name)."),
         stages: str = typer.Option("", help="Comma-separated stages to run; empty = all, in dvc.yaml order."),
         set_params: list[str] = typer.Option([], "-S", "--set-param", help="key=value override, as in dvc exp run."),
         tag: str = typer.Option("", help="Suffix of the result file, e.g. fine-tuned-gpu."),
         keep_eval: bool = typer.Option(False, help="Copy the run's eval outputs to bench/results/runs/."),
         out: Path | None = typer.Option(
             None, help="Result file; default bench/results/stage_resources_<name>[_<tag>].json.")) -> None:
    yaml = YAML()
    params = yaml.load(ROOT / "params.yaml")
    params["data"]["name"] = name
    for assignment in set_params:
        set_key(params, assignment)
    params_file = Path(tempfile.mkdtemp()) / "params.yaml"  # beside it, the catalogue the download stage reads
    shutil.copytree(ROOT / "datasets", params_file.parent / "datasets")
    yaml.dump(params, params_file)
    chosen = [s for s in stages.split(",") if s]
    suffix = f"_{tag}" if tag else ""
    out = out or ROOT / "bench" / "results" / f"stage_resources_{name}{suffix}.json"
    previous = json.loads(out.read_text()) if out.exists() else {}
    rerun = rerun_command(without_out(sys.argv[1:]))
    earlier = previous.get("command")
    command_line = rerun if earlier in (None, rerun) else f"{earlier} && {rerun}"
    report, commands = {}, {s: c for s, c in stage_commands(name).items() if not chosen or s in chosen}

    def save() -> None:
        out.write_text(json.dumps({**previous, **report, **({"overrides": set_params} if set_params else {}),
                                   "command": command_line}, indent=2) + "\n")

    for stage, command in commands.items():
        command = [sys.executable if part == "python" else part for part in command] + ["--params", str(params_file)]
        env = {"DVC_STAGE": stage} if "track" in commands else {}
        report[stage] = {**measure(command, env), "output_bytes": output_bytes(stage, name)}
        print(f"{stage}: {report[stage]}", flush=True)
        save()
    if "evaluate" in report:  # its search rate goes to MLflow alone: the record keeps it for results_table.py
        metrics = json.loads((ROOT / "artifacts" / name / "eval" / "metrics.json").read_text())
        report["evaluate"]["queries_per_s"] = logged_figure("evaluate", "retrieval.queries_per_s", metrics)
        save()
    if keep_eval:
        kept = ROOT / "bench" / "results" / "runs" / f"{name}{suffix}"
        kept.mkdir(parents=True, exist_ok=True)
        for relative in KEPT:
            source = ROOT / "artifacts" / name / relative
            if source.exists():
                shutil.copy2(source, kept / source.name)
        shutil.copy2(params_file, kept / "params.yaml")
    print("| stage | wall (s) | CPU (s) | peak RSS (MB) |\n|---|---|---|---|")
    for stage, values in report.items():
        print(f"| {stage} | {values['wall_s']} | {values['cpu_s']} | {values['peak_rss_mb']} |")


if __name__ == "__main__":
    typer.run(main)
