"""One Markdown table per dataset: our evaluate runs and the peer baselines, with paired t-tests.

    python scripts/results_table.py artifacts/foldoc/eval bench/results/runs/wordnet_fine-tuned-gpu [...]

Rows come from
- each RUN folder given (metrics.json + per_instance.npz, as the evaluate stage writes them, or as
  bench/stage_resources.py --keep-eval copies them to bench/results/runs/<run>/): one row per method
  in it (rae, rae_query_lambda, dual_encoder, knn, ...), named by run and recipe: "RAE λ=0.5",
  "RAE auto λ=0.7" (metrics.json's selection), "RAE per-query λ" ("fell back to λ=..." when the
  tune stage kept the fixed λ), "dual encoder", "kNN". Its dataset is data.name of the params.yaml in the folder, else
  the name of the folder above an `eval` folder (artifacts/<name>/eval). Train time is the train
  stage's wall time from stage_resources_<run>.json (beside runs/, or in bench/results for an
  artifacts/<run>/eval folder) when that file has one; predict
  time per 1k queries is RAE's joint search (query encoding is not in it, as the peers' TF-IDF of the
  test texts is not in theirs) at the evaluate stage's queries/s: metrics.json's retrieval.queries_per_s
  in runs recorded before that timing went to MLflow alone, else stage_resources_<run>.json's (which
  copies it from MLflow), else the figure of the MLflow run that logged this metrics.json (the project's
  store, or MLFLOW_TRACKING_URI); model memory is the size on
  disk of the model/ and index/ folders beside an artifacts/<name>/eval folder. Unknown values show "—".
- every peer result bench/results/<peer>_<name>.json (with its .npz) that bench/peers/*.py wrote.

Each RAE row (rae and rae_*) gets the two-sided paired t-test (evaluation/significance.py) of its per-input values
against the best non-RAE row of its dataset by P@1 (peers, and our dual encoder and kNN rows alike),
one p-value per metric column, and in the JSON against the best peer too (`vs_peer`: the margins that
docs/results.md's peer-margins table prints). Writes bench/results/results_table.md and results_table.json.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from ruamel.yaml import YAML

from raexmc.errors import DataError
from raexmc.evaluation.significance import load_per_instance, paired_ttest
from raexmc.io import atomic_file, read_json, write_json
from raexmc.pipeline.compare import logged_figure
from raexmc.pipeline.tracking.stage import user_errors

RESULTS = Path("bench/results")
METRICS = ("P@1", "P@5", "nDCG@5", "PSP@5", "R@100")
RAE = "rae"
SEARCH_RATE = "retrieval.queries_per_s"  # what the evaluate stage logs to MLflow


def run_dataset(folder: Path) -> str:
    """The dataset a run folder evaluated: its params.yaml's data.name, else artifacts/<name>/eval's name."""
    if (folder / "params.yaml").is_file():
        return str(YAML(typ="safe").load((folder / "params.yaml").read_text())["data"]["name"])
    if folder.resolve().name == "eval":
        return folder.resolve().parent.name
    raise DataError("cannot tell the dataset of this run: no params.yaml and not an artifacts/<name>/eval folder",
                    folder)


def size_mb(folders: list[Path]) -> float | None:
    files = [p for folder in folders if folder.is_dir() for p in folder.rglob("*") if p.is_file()]
    return round(sum(p.stat().st_size for p in files) / 1e6, 1) if files else None


def is_rae(method: str) -> bool:
    return method == RAE or method.startswith(RAE + "_")


def method_label(method: str, metrics: dict[str, Any], params_lambda: Any = None) -> str:
    """What a row's method is, with the λ it ran at where the run records it (metrics.json's selection,
    else the infer.lambda of the run's params.yaml, for runs made before the tune stage)."""
    selection, query_lambda = metrics.get("selection") or {}, metrics.get("query_lambda") or {}
    if method == RAE and "lambda" not in selection and isinstance(params_lambda, (int, float)):
        selection = {"lambda": params_lambda}
    if method == RAE:
        if "lambda" not in selection:
            return "RAE"
        auto = "auto " if selection.get("auto", {}).get("lambda") else ""
        return f"RAE {auto}λ={selection['lambda']:g}"
    if method == "rae_query_lambda":
        fallback = query_lambda.get("fallback")
        return ("RAE per-query λ" if query_lambda.get("uses_model", 1) or fallback is None
                else f"RAE per-query λ (fell back to λ={fallback:g})")
    return {"dual_encoder": "dual encoder", "knn": "kNN"}.get(method, method)


def search_rate(metrics: dict[str, Any], record: dict[str, Any]) -> float | None:
    """The evaluate stage's queries/s for this metrics.json (see the module's docstring for where it lives)."""
    return (metrics.get("retrieval", {}).get("queries_per_s") or record.get("evaluate", {}).get("queries_per_s")
            or logged_figure("evaluate", SEARCH_RATE, metrics))


def run_rows(folder: Path, results: Path) -> list[dict[str, Any]]:
    """One row per method of an evaluate run."""
    if not (folder / "metrics.json").is_file():
        raise DataError("no metrics.json in this run folder", folder)
    metrics, per_instance = read_json(folder / "metrics.json"), load_per_instance(folder / "per_instance.npz")
    home = folder.resolve().parent if folder.resolve().name == "eval" else None
    run = home.name if home else folder.name
    # bench/stage_resources.py writes stage_resources_<run>.json beside the runs/ folder it copies runs to
    resources = (folder.parent.parent if folder.parent.name == "runs" else results) / f"stage_resources_{run}.json"
    params = YAML(typ="safe").load((folder / "params.yaml").read_text()) if (folder / "params.yaml").is_file() else {}
    # a zero-shot run's train stage only exports the pre-trained encoder: that is no training time
    zero_shot = (params.get("encoder") or {}).get("mode") == "zero-shot"
    record = read_json(resources) if resources.is_file() else {}
    train_s = None if zero_shot else record.get("train", {}).get("wall_s")
    qps = search_rate(metrics, record)
    params_lambda = (params.get("infer") or {}).get("lambda")
    rows = []
    for method, summary in metrics.items():
        if not isinstance(summary, dict) or "P@1" not in summary:  # retrieval, selection, query_lambda
            continue
        rae = is_rae(method)
        rows.append({"dataset": run_dataset(folder), "name": f"{run}: {method_label(method, metrics, params_lambda)}",
                     "method": method, "metrics": {m: summary.get(m) for m in METRICS},
                     "train_s": train_s if rae else None,
                     "predict_s_per_1k": round(1000 / qps, 3) if rae and qps else None,
                     "model_mb": size_mb([home / "model", home / "index"]) if home and rae else None,
                     "per_instance": {m: per_instance.get(f"{method}/{m}") for m in METRICS}})
    return rows


def peer_rows(results: Path) -> list[dict[str, Any]]:
    """One row per peer result JSON (those with a "peer" key) and its per-instance .npz."""
    rows = []
    for path in sorted(results.glob("*.json")):
        report = read_json(path)
        if not isinstance(report, dict) or "peer" not in report:
            continue
        per_instance = load_per_instance(path.with_suffix(".npz"))
        peer = report["peer"]
        rows.append({"dataset": report["dataset"], "name": report["model"], "method": peer, "peer": True,
                     "metrics": {m: report["metrics"].get(m) for m in METRICS},
                     "train_s": report["train_s"], "predict_s_per_1k": report["predict_s_per_1k"],
                     "model_mb": report["model_mb"],
                     "per_instance": {m: per_instance.get(f"{peer}/{m}") for m in METRICS}})
    return rows


def significance(rows: list[dict[str, Any]]) -> None:
    """Give each RAE row "vs" (the best non-RAE row by P@1) and "p" (metric -> paired t-test p-value), and
    "vs_peer": the best peer by P@1, its P@1, and per metric the difference in points and the test's p (p_value,
    log10_p)."""
    def tested(row: dict[str, Any], other: dict[str, Any]) -> dict[str, dict[str, float]]:
        return {m: paired_ttest(row["per_instance"][m], other["per_instance"][m]) for m in METRICS
                if row["per_instance"][m] is not None and other["per_instance"][m] is not None}

    others = [row for row in rows if not is_rae(row["method"]) and row["metrics"]["P@1"] is not None]
    if not others:
        return
    best = max(others, key=lambda row: row["metrics"]["P@1"])
    peers = [row for row in others if row.get("peer")]
    best_peer = max(peers, key=lambda row: row["metrics"]["P@1"]) if peers else None
    for row in rows:
        if is_rae(row["method"]):
            row["vs"] = best["name"]
            row["p"] = {m: test["p_value"] for m, test in tested(row, best).items()}
            if best_peer is not None:
                tests = tested(row, best_peer)
                row["vs_peer"] = {"name": best_peer["name"], "P@1": best_peer["metrics"]["P@1"],
                                  "diff": {m: round(100 * test["mean_diff"], 4) for m, test in tests.items()},
                                  "p": {m: {k: test[k] for k in ("p_value", "log10_p")} for m, test in tests.items()}}


def _cell(value: Any, fmt: str = "{:.2f}") -> str:
    return "—" if value is None else fmt.format(value)


def _p(value: float | None) -> str:
    """A p-value in two significant digits; below the smallest double it reads "<1e-300"."""
    return "<1e-300" if value == 0.0 else _cell(value, "{:.1e}")


def markdown(dataset: str, rows: list[dict[str, Any]]) -> str:
    lines = [f"### {dataset}", "",
             "| method | " + " | ".join(METRICS) + " | train s | predict s / 1k queries | model MB | p vs best non-RAE "
             "(" + ", ".join(METRICS) + ") |",
             "|---" * (len(METRICS) + 5) + "|"]
    for row in rows:
        p = "" if "p" not in row else f"vs {row['vs']}: " + " / ".join(_p(row["p"].get(m)) for m in METRICS)
        lines.append(f"| {row['name']} | " + " | ".join(_cell(row["metrics"][m]) for m in METRICS)
                     + f" | {_cell(row['train_s'], '{:.1f}')} | {_cell(row['predict_s_per_1k'], '{:.3f}')}"
                     f" | {_cell(row['model_mb'], '{:.1f}')} | {p} |")
    return "\n".join(lines) + "\n"


def build_tables(runs: list[Path], results: Path = RESULTS) -> dict[str, list[dict[str, Any]]]:
    """Rows per dataset (runs' rows first, then peers, each dataset sorted by P@1), RAE rows tested."""
    rows = [row for folder in runs for row in run_rows(folder, results)] + peer_rows(results)
    tables: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        tables.setdefault(row["dataset"], []).append(row)
    for dataset_rows in tables.values():
        dataset_rows.sort(key=lambda row: -(row["metrics"]["P@1"] or 0.0))
        significance(dataset_rows)
    return tables


def main(runs: list[Path] = typer.Argument(None, help="evaluate run folders (metrics.json + per_instance.npz)"),
         results: Path = RESULTS) -> None:
    with user_errors():
        tables = build_tables(runs or [], results)
    text = "\n".join(markdown(dataset, rows) for dataset, rows in sorted(tables.items()))
    with atomic_file(results / "results_table.md", "w", encoding="utf-8") as handle:
        handle.write(text)
    write_json(results / "results_table.json",
               {dataset: [{k: v for k, v in row.items() if k != "per_instance"} for row in rows]
                for dataset, rows in tables.items()})
    print(text)


if __name__ == "__main__":
    typer.run(main)
