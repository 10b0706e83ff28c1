"""Wall time and peak memory (max RSS, from /usr/bin/time -v) of every pipeline stage on one dataset.

    python bench/stage_resources.py --name wordnet [--stages download,tokenize]

Runs each stage's command from dvc.yaml directly (outside DVC, so the numbers are the stage's
own), with a copy of params.yaml whose data.name is NAME; writes
bench/results/stage_resources_<name>.json and prints a Markdown table.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import typer
from ruamel.yaml import YAML


def stage_commands(name: str) -> dict[str, list[str]]:
    stages = YAML(typ="safe").load(Path("dvc.yaml").read_text())["stages"]
    return {stage: shlex.split(spec["cmd"].replace("${data.name}", name)) for stage, spec in stages.items()}


def measure(command: list[str]) -> dict[str, float]:
    proc = subprocess.run(["/usr/bin/time", "-v", *command], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{proc.stderr[-3000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", proc.stderr)
    hours, minutes, seconds = (float(g) if g else 0.0 for g in wall.groups())
    rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr).group(1))
    return {"wall_s": round(hours * 3600 + minutes * 60 + seconds, 1), "peak_rss_mb": round(rss_kb / 1024, 1)}


def main(name: str = "foldoc", stages: str = "") -> None:
    yaml = YAML()
    params = yaml.load(Path("params.yaml"))
    params["data"]["name"] = name
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
        yaml.dump(params, handle)
    chosen = [s for s in stages.split(",") if s]
    report = {}
    for stage, command in stage_commands(name).items():
        if chosen and stage not in chosen:
            continue
        command = [sys.executable if part == "python" else part for part in command] + ["--params", handle.name]
        report[stage] = measure(command)
        print(f"{stage}: {report[stage]}", flush=True)
    out = Path("bench/results") / f"stage_resources_{name}.json"
    previous = json.loads(out.read_text()) if out.exists() else {}
    out.write_text(json.dumps({**previous, **report}, indent=2) + "\n")
    print("| stage | wall (s) | peak RSS (MB) |\n|---|---|---|")
    for stage, values in report.items():
        print(f"| {stage} | {values['wall_s']} | {values['peak_rss_mb']} |")


if __name__ == "__main__":
    typer.run(main)
