"""What `memory.keep: auto` costs the tune stage: its wall time at a numeric keep and at auto, on one dataset.

    python bench/keep_auto.py --name foldoc [--keep 1.0] [-S infer.lambda=auto --tag lambda-auto] [--root PROJECT]

Runs stages/tune.py outside DVC on <root>/data/<name> and <root>/artifacts/<name>/embeddings (root: this
checkout), first with memory.keep = --keep, then with memory.keep auto (memory.keep_grid as params.yaml sets it),
each into a scratch folder, with params.yaml's other values and the `-S key=value` overrides. Records each run's
wall and CPU time and peak memory (stage_resources.measure), what it chose and, for auto, the keep curve (and,
where `memory.prototypes: auto` chose α, that run's α curve at the keep it chose), in
bench/results/keep_auto_<name>[_<tag>].json with the command that reproduces it.
"""

from __future__ import annotations

import json
import shlex
import sys
import tempfile
from pathlib import Path

import typer
from ruamel.yaml import YAML

from stage_resources import measure, set_key

ROOT = Path(__file__).resolve().parents[1]
CHOICE = ("keep", "prototypes", "lambda", "tau", "label_share", "metric", "val_value", "memory_input_keys",
          "val_queries")
CURVES = ("keep_curve", "prototypes_curve")   # what the run chose among, where it chose


def tune_run(root: Path, name: str, params: dict, keep: object, scratch: Path) -> dict:
    """One tune stage at memory.keep = `keep`: its resources and its choice."""
    params = {**params, "memory": {**params["memory"], "keep": keep}}
    params_file, out = scratch / f"params-{keep}.yaml", scratch / f"tune-{keep}"
    YAML().dump(params, params_file)
    command = [sys.executable, str(ROOT / "stages/tune.py"), "--dataset", str(root / "data" / name),
               "--embeddings", str(root / "artifacts" / name / "embeddings"), "--out", str(out),
               "--params", str(params_file)]
    resources = measure(command)
    selection = json.loads((out / "selection.json").read_text())
    chosen = {key: selection[key] for key in CHOICE if key in selection}
    return {"memory.keep": keep, **resources, "chosen": chosen,
            **{curve: selection[curve] for curve in CURVES if curve in selection}}


def main(name: str = typer.Option("foldoc", help="Dataset (an entry of params.yaml datasets)."),
         keep: float = typer.Option(1.0, help="The numeric memory.keep to compare auto with."),
         set_params: list[str] = typer.Option([], "-S", "--set-param", help="key=value override, as in dvc exp run."),
         root: Path = typer.Option(ROOT, help="Project folder holding data/<name> and artifacts/<name>/embeddings."),
         tag: str = typer.Option("", help="Suffix of the result file, e.g. lambda-auto."),
         out: Path | None = typer.Option(None, help="Result file; default "
                                                    "bench/results/keep_auto_<name>[_<tag>].json.")) -> None:
    params = YAML(typ="safe").load((ROOT / "params.yaml").read_text())
    params["data"]["name"] = name
    for assignment in set_params:
        set_key(params, assignment)
    out = out or ROOT / "bench" / "results" / f"keep_auto_{name}{f'_{tag}' if tag else ''}.json"
    with tempfile.TemporaryDirectory() as scratch:
        runs = [tune_run(root, name, params, setting, Path(scratch)) for setting in (keep, "auto")]
    fixed, auto = runs
    report = {"dataset": name, "keep_grid": params["memory"]["keep_grid"], "method": params["memory"]["method"],
              **({"overrides": set_params} if set_params else {}), "runs": runs,
              "auto_over_fixed_wall": round(auto["wall_s"] / max(fixed["wall_s"], 1e-9), 2),
              "command": "python " + shlex.join(["bench/keep_auto.py", *sys.argv[1:]])}
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"tune at keep {keep}: {fixed['wall_s']} s; at auto: {auto['wall_s']} s "
          f"({report['auto_over_fixed_wall']}x), chose keep {auto['chosen']['keep']}")


if __name__ == "__main__":
    typer.run(main)
