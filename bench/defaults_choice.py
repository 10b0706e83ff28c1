"""Which inference settings the default run should choose on validation: the paper's fixed setting against λ and τ
auto, then the split retrieval with its label share auto, then the memory's keep auto, on one dataset.

    python bench/defaults_choice.py --name foldoc [--configs paper,lambda-tau,split,keep] [--root PROJECT]

Needs, in the project folder (--root, default this checkout), data/<name> and artifacts/<name>/{embeddings,index}
(the pipeline's download to index stages, for the encoder params.yaml sets). Each configuration is the
`paper-inference` preset of params.yaml plus its overrides (CONFIGS), so the comparison does not move when
params.yaml's defaults do; every other key is params.yaml's. For each, runs the tune, memory, evaluate and
significance stages outside DVC (stage_resources.py: wall and CPU seconds, peak memory) into artifacts/<name>, and
records what tune chose (RAE's and kNN's), RAE's, kNN's and the dual encoder's test P@1, P@5 and R@100, and RAE's
paired t-tests against each baseline; and, since kNN runs at the paper's τ where τ is fixed, RAE's t-test against
kNN at its own validation-chosen τ (the first configuration with τ auto); and RAE's t-tests against RAE of the
configuration before it and of the paper's (what each added choice gains). Writes the dataset's entry of
bench/results/defaults_choice.json after each configuration, keeping the other datasets' entries and the record's
note.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import typer
from ruamel.yaml import YAML

from common import ROOT, preset_values, rerun_command
from raexmc.evaluation.significance import p_value_text, paired_ttest
from raexmc.params import load_params
from stage_resources import measure, set_key, stage_commands

PRESET = "paper-inference"
CONFIGS = {   # overrides on top of the preset, each adding one choice to the one before
    "paper": [],
    "lambda-tau": ["infer.lambda=auto", "infer.tau=auto"],
    "split": ["infer.lambda=auto", "infer.tau=auto", "infer.retrieval=split", "infer.label_share=auto"],
    "keep": ["infer.lambda=auto", "infer.tau=auto", "infer.retrieval=split", "infer.label_share=auto",
             "memory.keep=auto"],
}
STAGES = ("tune", "memory", "evaluate", "significance")
METHODS = ("rae", "knn", "dual_encoder")
REPORTED = ("P@1", "P@5", "R@100")
CHOSEN = ("lambda", "tau", "retrieval", "label_share", "val_value", "memory_input_keys", "val_queries", "val_folds")
RECORD = Path("bench", "results", "defaults_choice.json")


def config_params(root: Path, name: str, overrides: list[str]) -> dict:
    """The project's params.yaml with data.name `name`, the preset's values and then `overrides` set."""
    params = YAML(typ="safe").load((root / "params.yaml").read_text())
    params["data"]["name"] = name
    preset = preset_values(load_params(root / "params.yaml"), PRESET)
    for assignment in [f"{key}={json.dumps(value)}" for key, value in preset.items()] + overrides:
        set_key(params, assignment)
    return params


def run_config(root: Path, name: str, params: dict, scratch: Path) -> dict[str, Any]:
    """The four stages (this checkout's scripts) at `params` in the project `root`: each one's resources, with the
    machine's load average before it."""
    params_file = scratch / "params.yaml"
    YAML().dump(params, params_file)
    commands = stage_commands(name)
    resources = {}
    for stage in STAGES:
        command = [sys.executable if part == "python" else str(ROOT / part) if part.startswith("stages/") else part
                   for part in commands[stage]]
        load = round(os.getloadavg()[0], 2)
        resources[stage] = {**measure([*command, "--params", str(params_file)], root), "load_before": load}
    return resources


def t_test(ours: np.ndarray, theirs: np.ndarray) -> dict[str, Any]:
    test = paired_ttest(100 * ours, 100 * theirs)
    return {"diff": round(test["mean_diff"], 2), "p": p_value_text(test)}


def outcome(root: Path, name: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """What the stages just wrote: the choice, the test metrics, RAE's t-tests, and the per-query values."""
    folder = root / "artifacts" / name
    selection = json.loads((folder / "tune" / "selection.json").read_text())
    metrics = json.loads((folder / "eval" / "metrics.json").read_text())
    per_query = dict(np.load(folder / "eval" / "per_instance.npz"))
    chosen = {key: selection[key] for key in CHOSEN if key in selection}
    chosen.update({key: selection[key] for key in ("keep", "prototypes") if key in selection})
    chosen["knn_tau"] = selection["baselines"]["knn"]["tau"]
    tests = {f"rae_vs_{method}": {metric: t_test(per_query[f"rae/{metric}"], per_query[f"{method}/{metric}"])
                                  for metric in REPORTED} for method in METHODS[1:]}
    test = {method: {metric: metrics[method][metric] for metric in REPORTED} for method in METHODS}
    return {"chosen": chosen, "test": test, "t_tests": tests}, per_query


def main(name: str = typer.Option("foldoc", help="Dataset (an entry of params.yaml datasets)."),
         configs: str = typer.Option(",".join(CONFIGS), help="Comma-separated configurations to run, of: "
                                                              + ", ".join(CONFIGS)),
         root: Path = typer.Option(ROOT, help="Project folder holding params.yaml, data/<name> and "
                                              "artifacts/<name>/{embeddings,index}; the record goes to its "
                                              "bench/results.")) -> None:
    chosen = [c for c in configs.split(",") if c]
    unknown = [c for c in chosen if c not in CONFIGS]
    if unknown:
        raise typer.BadParameter(f"unknown configuration(s) {unknown}; known: {list(CONFIGS)}", param_hint="--configs")
    out = root / RECORD
    record = json.loads(out.read_text()) if out.is_file() else {}
    entry = record.setdefault("datasets", {}).setdefault(name, {})
    entry["command"] = rerun_command()
    rae = {}   # each configuration's per-query RAE values, tested at the end against kNN at its own τ
    tuned_knn = None   # kNN's per-query values from the first configuration whose tune stage chose kNN's τ
    for config in chosen:
        with tempfile.TemporaryDirectory() as scratch:
            resources = run_config(root, name, config_params(root, name, CONFIGS[config]), Path(scratch))
        result, per_query = outcome(root, name)
        rae[config] = {metric: per_query[f"rae/{metric}"] for metric in REPORTED}
        if tuned_knn is None and "tau=auto" in " ".join(CONFIGS[config]):
            tuned_knn = {metric: per_query[f"knn/{metric}"] for metric in REPORTED}
        entry.setdefault("configs", {})[config] = {
            "overrides": CONFIGS[config], **result, "stages": resources,
            **{f"tune_evaluate_{what}": round(sum(resources[s][what] for s in ("tune", "evaluate")), 1)
               for what in ("wall_s", "cpu_s")}}
        out.write_text(json.dumps(record, indent=2) + "\n")
        print(f"{name} {config}: {json.dumps(result)}", flush=True)
    previous = None
    for config, values in rae.items():
        tests = entry["configs"][config]["t_tests"]
        if tuned_knn is not None:
            tests["rae_vs_knn_own_tau"] = {metric: t_test(values[metric], tuned_knn[metric]) for metric in REPORTED}
        for other, key in ((previous, "rae_vs_previous_config"), ("paper", "rae_vs_paper")):
            if other in rae and other != config:
                tests[key] = {"config": other, **{metric: t_test(values[metric], rae[other][metric])
                                                   for metric in REPORTED}}
        previous = config
    out.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    typer.run(main)
