"""The paper's loss ablation on one dataset: fine-tune with instance negatives and hard negatives
switched on and off, each as a `dvc exp run --temp` experiment, and record the test metrics.

    python bench/loss_ablation.py --name foldoc            # all four variants, about 17 min each on 2 cores
    python bench/loss_ablation.py --name foldoc --only no-hard
    python bench/loss_ablation.py --name foldoc --reuse full=foldoc-ft   # record one already run
    python bench/loss_ablation.py --name foldoc --folder full=bench/results/runs/foldoc_ablation-full ...

Every variant is a named DVC experiment (ablation-<dataset>-<variant>), so `dvc exp show` and the
MLflow UI hold the same numbers. Where DVC is not installed (an offline GPU machine), run each variant
with `bench/stage_resources.py -S ... --keep-eval` and record its kept folder with --folder (its
params.yaml is checked the same way). Results go to bench/results/loss_ablation_<dataset>.json, with
a paired t-test of the full loss against each variant on the same test inputs.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import typer
from ruamel.yaml import YAML

from common import ROOT
from raexmc.evaluation.significance import compare_runs

VARIANTS = {  # name: (hard negatives, instance negatives)
    "full": (True, True),
    "no-instance": (True, False),
    "no-hard": (False, True),
    "neither": (False, False),
}
METRICS = ("P@1", "P@5", "nDCG@5", "PSP@5", "R@100")
TESTED = ["P@1", "P@5", "R@100"]  # paired t-tests of the full loss against each variant


def run_variant(dataset: str, variant: str) -> str:
    """Run one variant as a temp-dir experiment and return its name. PYTHONPATH=src makes the
    experiment import the code of its own checkout, not the (editable) working tree's."""
    hard, instance = VARIANTS[variant]
    name = f"ablation-{dataset}-{variant}"
    command = ["dvc", "exp", "run", "--temp", "--force", "-n", name, "-S", f"data.name={dataset}",
               "-S", "encoder.mode=fine-tuned", "-S", f"train.hard_negatives={str(hard).lower()}",
               "-S", f"train.instance_negatives={str(instance).lower()}"]
    subprocess.run(command, cwd=ROOT, check=True, env={**os.environ, "PYTHONPATH": "src"})
    return name


def experiment_data(name: str) -> dict:
    """Params and metrics of a named experiment, read through `dvc exp show`."""
    shown = json.loads(subprocess.run(["dvc", "exp", "show", "--json", "-A"], cwd=ROOT, check=True,
                                      capture_output=True, text=True).stdout)
    for commit in shown:
        for experiment in commit.get("experiments") or []:
            if experiment.get("name") == name:
                return experiment["revs"][0]["data"]
    raise SystemExit(f"experiment {name} not found in `dvc exp show -A`")


def check_variant(params: dict, dataset: str, variant: str, name: str) -> None:
    """A reused run must be the variant: same dataset, fine-tuned, same two switches."""
    hard, instance = VARIANTS[variant]
    found = (params["data"]["name"], params["encoder"]["mode"], params["train"]["hard_negatives"],
             params["train"]["instance_negatives"])
    if found != (dataset, "fine-tuned", hard, instance):
        raise SystemExit(f"experiment {name} is {found}, not variant {variant} of {dataset}")


def per_instance(source: str, dataset: str) -> dict[str, np.ndarray]:
    """A run's per-instance test results: from its kept folder, or from the DVC cache by experiment name."""
    if Path(source).is_dir():
        raw = (Path(source) / "per_instance.npz").read_bytes()
    else:
        import dvc.api

        with dvc.api.open(f"artifacts/{dataset}/eval/per_instance.npz", repo=str(ROOT), rev=source,
                          mode="rb") as handle:
            raw = handle.read()
    with np.load(io.BytesIO(raw)) as archive:
        return {key: archive[key] for key in archive.files}


def run_record(source: str, dataset: str) -> tuple[dict, dict]:
    """(params, test metrics) of a run: a folder kept by stage_resources.py, or a DVC experiment."""
    if Path(source).is_dir():
        folder = Path(source)
        return YAML(typ="safe").load(folder / "params.yaml"), json.loads((folder / "metrics.json").read_text())
    import dvc.api

    data = experiment_data(source)  # metrics.json is an output, not a DVC metric: read it from the cache
    metrics = json.loads(dvc.api.read(f"artifacts/{dataset}/eval/metrics.json", repo=str(ROOT), rev=source))
    return data["params"]["params.yaml"]["data"], metrics


def full_against_variants(results: dict, dataset: str) -> None:
    """Add to each variant the paired t-test of the full loss against it (RAE and λ=0)."""
    full = per_instance(results["full"]["experiment"], dataset)
    for variant, row in results.items():
        if variant != "full":
            report = compare_runs(full, TESTED, per_instance(row["experiment"], dataset))
            row["full_vs_this"] = {method: {metric: {k: test[k] for k in ("mean_diff", "ci_low", "ci_high", "p_value")}
                                            for metric, test in report[f"{method}_vs_other"].items()}
                                   for method in ("rae", "dual_encoder")}


def main(name: str = typer.Option("foldoc", help="Dataset (a file of datasets/, by name)."),
         only: list[str] = typer.Option(list(VARIANTS), help="Variants to run: " + ", ".join(VARIANTS)),
         reuse: list[str] = typer.Option([], help="VARIANT=EXPERIMENT: record an experiment already run "
                                                  "(its params are checked) instead of running the variant."),
         folder: list[str] = typer.Option([], help="VARIANT=FOLDER: record a run kept by stage_resources.py "
                                                   "--keep-eval (its params are checked)."),
         ) -> None:
    out = ROOT / "bench" / "results" / f"loss_ablation_{name}.json"
    results = json.loads(out.read_text()) if out.is_file() else {}
    reused = dict(item.split("=", 1) for item in [*reuse, *folder])
    for variant in [*reused, *(v for v in only if v not in reused)]:
        if variant not in VARIANTS:
            raise typer.BadParameter(f"unknown variant {variant!r}; one of {', '.join(VARIANTS)}")
        experiment = reused.get(variant) or run_variant(name, variant)
        params, metrics = run_record(experiment, name)
        check_variant(params, name, variant, experiment)
        hard, instance = VARIANTS[variant]
        results[variant] = {"experiment": experiment, "hard_negatives": hard, "instance_negatives": instance,
                            **{f"{method}.{m}": metrics[method][m] for method in ("rae", "dual_encoder", "knn")
                               for m in METRICS}}
        out.write_text(json.dumps(results, indent=2) + "\n")
        print(json.dumps({variant: results[variant]}), file=sys.stderr)
    if "full" in results and len(results) > 1:
        full_against_variants(results, name)
        out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    typer.run(main)
