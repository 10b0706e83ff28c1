"""A λ per query against the best fixed λ: fitted on a validation split, measured on the test set.

    python bench/query_lambda.py --name foldoc [--root . --b 200 --tau 0.04 --folds 5 --ridge 1]

Reads <root>/data/<name> and the embeddings in <root>/artifacts/<name>/embeddings. The training inputs the
tune stage holds out under <root>/params.yaml (data.held_out.tune_split: infer.val_fraction and val_seed, or
training's own split where encoder.mode is fine-tuned) become validation queries against a memory of the
other training inputs and every label; the model (rae/query_lambda.py) is fitted on them for P@1 over
the λ grid. On the test set (memory: every training input and label, exact search) its P@1 is compared
with every fixed λ of the grid, by a paired t-test against the best of them on test (an oracle choice),
the fixed λ the validation split picks, and the paper's λ. Writes bench/results/query_lambda_<name>.json.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import typer

from raexmc.data.dataset import Dataset
from raexmc.encoder.vectors import load_embeddings
from raexmc.evaluation.evaluator import HEADLINE, Evaluator, rae_scorer
from raexmc.evaluation.propensity import table_propensity
from raexmc.evaluation.selection import held_out_labels, validation_retrieval
from raexmc.evaluation.query_lambda_fit import (fit_on_validation, metric_by_lambda, per_query_lambda_scorer,
                                                per_query_metric)
from raexmc.evaluation.significance import paired_ttest
from raexmc.memory.exact import ExactIndex
from raexmc.memory.keys_values import memory_keys, training_values
from raexmc.rae.model import RaeModel, RaeSettings
from raexmc.rae.query_lambda import FEATURES
from raexmc.rae.scoring import PAPER_B, PAPER_LAMBDA, PAPER_TAU
from raexmc.data.held_out import split_validation, tune_split
from raexmc.params import load_params

GRID = (0.0, 0.01, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0)  # params.yaml's evaluate.lambda_sweep


def _percent(values: np.ndarray) -> float:
    return round(100 * float(np.mean(values)), 2)


def _rounded_test(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    return {k: (round(v, 4) if k != "p_value" else float(f"{v:.3g}")) for k, v in paired_ttest(100 * a, 100 * b).items()}


def main(name: str = "foldoc", root: Path = Path("."), b: int = PAPER_B, tau: float = PAPER_TAU, folds: int = 5,
         ridge: float = 1.0) -> None:
    dataset = Dataset(root / "data" / name)
    embeddings = root / "artifacts" / name / "embeddings"
    grid = np.array(GRID)
    ab = table_propensity(dataset.names).ab
    Y_train = training_values(dataset.label_matrix("train"))

    started = time.perf_counter()
    split = tune_split(load_params(root / "params.yaml"))
    rest, held = split_validation(Y_train, split.fraction, split.seed)
    validation = validation_retrieval(embeddings, held_out_labels(Y_train, dataset.filter_matrix("train"), rest, held,
                                                                  fraction_key=split.fraction_key), b)
    model, fit = fit_on_validation(validation.hits(tau), validation.evaluator(ab), grid, tau, b,
                                   folds=folds, ridge=ridge)
    fit_s = time.perf_counter() - started

    queries = np.asarray(load_embeddings(embeddings, "test"), dtype=np.float32)
    joint = ExactIndex(memory_keys(embeddings)).search(queries, b)
    evaluator = Evaluator(Y_train, dataset.label_matrix("test"), dataset.filter_matrix("test"), ab)
    fixed = metric_by_lambda(joint, evaluator, grid, tau, b)  # (n, G) test P@1 per fixed λ
    started = time.perf_counter()
    lambdas = model.lambdas(*joint, Y_train)
    choose_s = time.perf_counter() - started
    ranked = evaluator.rank(len(queries), per_query_lambda_scorer(joint, Y_train, lambdas, tau, b))
    per_query = per_query_metric(evaluator, ranked)
    # The model only picks grid values, so its per-query P@1 must be the fixed table's at each pick.
    picked = np.searchsorted(grid, lambdas)
    assert np.array_equal(per_query, fixed[np.arange(len(queries)), picked]), "per-query λ scoring disagrees"

    oracle = int(fixed.mean(axis=0).argmax())
    by_validation = int(np.flatnonzero(grid == model.fallback)[0])
    paper = int(np.flatnonzero(grid == PAPER_LAMBDA)[0])
    def headline(ranked_queries: np.ndarray) -> dict[str, float]:
        summary = evaluator.summary(ranked_queries)[0]
        return {k: summary[k] for k in HEADLINE}

    best_fixed = RaeModel(Y_train, RaeSettings(GRID[oracle], tau, b))
    best_fixed_ranked = evaluator.rank(len(queries), rae_scorer(best_fixed, joint))
    report = {
        "dataset": name, "embeddings": str(json.loads((embeddings / "meta.json").read_text())["encoder"]),
        "b": b, "tau": tau, "grid": list(GRID), "features": list(FEATURES), "metric": "P@1",
        "validation": {"fraction": split.fraction, "seed": split.seed, "queries": int(len(held)),
                       "memory_inputs": int(len(rest)), **fit, "fit_s": round(fit_s, 1)},
        "model": model.to_json(),
        "test": {
            "queries": int(len(queries)),
            "fixed_P@1": {f"{lam:g}": _percent(fixed[:, j]) for j, lam in enumerate(GRID)},
            "per_query_P@1": _percent(per_query),
            "headline": {"per_query_lambda": headline(ranked), f"fixed_{GRID[oracle]:g}": headline(best_fixed_ranked)},
            "oracle_P@1": _percent(fixed.max(axis=1)),  # the best grid λ of every query: the ceiling
            "lambda_counts": {f"{lam:g}": int((lambdas == lam).sum()) for lam in GRID},
            "choose_us_per_query": round(1e6 * choose_s / len(queries), 2),
            "vs_best_fixed_on_test": {"lambda": GRID[oracle], **_rounded_test(per_query, fixed[:, oracle])},
            "vs_fixed_from_validation": {"lambda": GRID[by_validation],
                                         **_rounded_test(per_query, fixed[:, by_validation])},
            "vs_paper_lambda": {"lambda": GRID[paper], **_rounded_test(per_query, fixed[:, paper])},
        },
    }
    out = Path(__file__).resolve().parent / "results" / f"query_lambda_{name}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in ("validation", "test")}, indent=2))


if __name__ == "__main__":
    typer.run(main)
