"""How much RAE's two halves can give together on one dataset's embeddings, beyond RAE's own form: where RAE
does not beat kNN by much, whether another way of joining the label half to the input half would.

    python bench/halves_ceiling.py --name wordnet-hyper --tag fine-tuned [--alphas 0,0.5,1,2 --epochs 10]

Reads data/<name> and artifacts/<name>/embeddings (exact search), holds out training inputs as the tune stage
does (data.held_out.tune_split: params.yaml's infer.val_*, or training's split where its encoder.mode is
fine-tuned, so that mode must say how the embeddings were made), chooses every variant's free settings on them, and scores the test set once
per variant (P@1, P@5, PSP@5, R@100, with a paired t-test against kNN at its own validated τ):

- `oracle`: per test query the better of kNN's and the dual encoder's P@1: what any choice between the two
  halves' rankings could reach at best, and the share of queries the label half alone gets right;
- `split, label keys <kind>`: RAE's split retrieval (λ, τ and the label share chosen as the tune stage chooses
  them) with label keys that carry more than the label text: prototypes unit(z + α·unit(mean input key)) at the
  full memory (memory.prototypes; auto leaves them off at keep 1), and `learned`: a cosine classifier's label
  vectors trained on the memory's input keys (softmax over labels at the paper's τ, the target spread over an
  input's positives, started at the label texts' keys, Adam) - the strongest label half a frozen encoder gives;
- `mixture, label keys <kind>`: two softmaxes instead of one: λ·kNN(τ_x) + (1−λ)·dual encoder(τ_z), each half
  normalised on its own, (λ, τ_x, τ_z) chosen on the held-out inputs.

Writes <root>/bench/results/halves_ceiling_<name>[_<tag>].json.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
import typer
from split_retrieval import REPORTED, knn_tau, paired_tests

from raexmc.data.dataset import Dataset
from raexmc.encoder.vectors import load_embeddings
from raexmc.evaluation.evaluator import (
    EvalSettings,
    Evaluator,
    Retrievals,
    evaluate_retrieval,
)
from raexmc.evaluation.propensity import table_propensity
from raexmc.evaluation.selection import (
    TuneSettings,
    ValidationRetrieval,
    held_out_labels,
    rae_retrieval,
    select,
)
from raexmc.memory.exact import ExactIndex
from raexmc.memory.keys_values import training_values
from raexmc.memory.merge import RaeRetrieval
from raexmc.memory.prototypes import label_prototypes
from raexmc.memory.search import Hits
from raexmc.params import load_params
from raexmc.rae.scoring import PAPER_TAU, dual_encoder_scores, knn_scores
from raexmc.data.held_out import query_sample, split_validation

BATCH = 1024      # inputs per step of the label vectors' training
LEARNING_RATE = 0.01


def learned_label_keys(inputs: np.ndarray, values: sp.csr_matrix, labels: np.ndarray, epochs: int,
                       seed: int = 0) -> np.ndarray:
    """Unit label vectors trained as a cosine classifier on frozen input keys: softmax over all labels of
    q·unit(w_l)/τ, cross-entropy against the input's positives spread evenly, w started at the label texts."""
    generator = torch.Generator().manual_seed(seed)
    weights = torch.nn.Parameter(torch.tensor(labels, dtype=torch.float32))
    optimizer = torch.optim.Adam([weights], lr=LEARNING_RATE)
    keys = torch.tensor(inputs, dtype=torch.float32)
    positives = sp.csr_matrix((values != 0).astype(np.float32))
    spread = sp.diags(1.0 / np.maximum(positives.getnnz(axis=1), 1)) @ positives
    for _ in range(epochs):
        for batch in torch.randperm(len(keys), generator=generator).split(BATCH):
            rows = batch.numpy()
            logits = keys[batch] @ torch.nn.functional.normalize(weights, dim=1).T / PAPER_TAU
            target = torch.tensor(spread[rows].toarray())
            loss = -(target * torch.log_softmax(logits, dim=1)).sum(dim=1).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return torch.nn.functional.normalize(weights.detach(), dim=1).numpy()


def label_key_kinds(alphas: list[float], epochs: int) -> list[str]:
    return [f"prototypes {alpha:g}" if alpha else "text" for alpha in alphas] + (["learned"] if epochs else [])


def label_keys(kind: str, inputs: np.ndarray, values: sp.csr_matrix, labels: np.ndarray, epochs: int) -> np.ndarray:
    """The label keys of one kind other than the label texts', made from the memory's `inputs` and their `values`
    alone."""
    if kind == "learned":
        return learned_label_keys(inputs, values, labels, epochs)
    return label_prototypes(inputs, values, labels, float(kind.split()[1]))


def mixture_scorer(inputs: Hits, labels: Hits, values: sp.csr_matrix, lam: float, tau_x: float, tau_z: float,
                   b: int):
    """Scores of some queries as λ·kNN(τ_x) + (1−λ)·dual encoder(τ_z), each from its own search."""
    def scores(rows: slice) -> sp.csr_matrix:
        knn = knn_scores(inputs[0][rows], inputs[1][rows], values, tau_x, b)
        dual = dual_encoder_scores(labels[0][rows], labels[1][rows], values.shape[1], tau_z, b)
        return sp.csr_matrix(lam * knn + (1.0 - lam) * dual)
    return scores


def choose_mixture(validation: ValidationRetrieval, evaluator: Evaluator, lambdas: list[float], taus: list[float],
                   metric: str) -> dict[str, Any]:
    """The (λ, τ_x, τ_z) of the mixture best on the held-out inputs (ties: the first of the grid)."""
    n = len(validation.inputs[0])
    curve = []
    for lam, tau_x, tau_z in itertools.product(lambdas, taus, taus):
        scorer = mixture_scorer(validation.inputs, validation.labels, validation.memory_values, lam, tau_x, tau_z,
                                validation.b)
        curve.append({"lambda": lam, "tau_x": tau_x, "tau_z": tau_z,
                      metric: evaluator.summary(evaluator.rank(n, scorer))[0][metric]})
    best = max(curve, key=lambda row: row[metric])
    return {**{k: best[k] for k in ("lambda", "tau_x", "tau_z")}, f"val_{metric}": best[metric],
            "curve_points": len(curve)}


def main(name: str = "wordnet-hyper", root: Path = Path("."), b: int = 200, alphas: str = "0,0.5,1,2",
         epochs: int = typer.Option(10, help="Epochs of the learned label keys (0: leave them out)."),
         tag: str = typer.Option("", help="Suffix of the record's name (letters, digits, '.', '_', '-').")) -> None:
    if tag and not re.fullmatch(r"[A-Za-z0-9._-]+", tag):
        raise typer.BadParameter(f"{tag!r}: use letters, digits, '.', '_' or '-'", param_hint="--tag")
    started = time.perf_counter()
    report = measure(root, name, b, [float(a) for a in alphas.split(",")], epochs)
    report["seconds"] = round(time.perf_counter() - started, 1)
    out = root / "bench" / "results" / f"halves_ceiling_{name}{'_' + tag if tag else ''}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in ("oracle", "test")}, indent=2))


def measure(root: Path, name: str, b: int, alphas: list[float], epochs: int) -> dict[str, Any]:
    dataset = Dataset(root / "data" / name)
    ab = table_propensity(dataset.names).ab
    embeddings = root / "artifacts" / name / "embeddings"
    X, Z, queries = (np.ascontiguousarray(load_embeddings(embeddings, split), dtype=np.float32)
                     for split in ("train", "labels", "test"))
    Y_all, filters = dataset.label_matrix("train"), dataset.filter_matrix("train")
    Y_train = training_values(Y_all, copy=False)
    evaluator = Evaluator(Y_train, dataset.label_matrix("test"), dataset.filter_matrix("test"), ab)
    params = TuneSettings.from_params(load_params(root / "params.yaml"))
    rest_rows, held_rows = split_validation(Y_all, params.val_fraction, params.val_seed)
    held = held_out_labels(Y_all, filters, rest_rows, query_sample(held_rows, params.val_max_queries,
                                                                    params.val_seed), params.relevance,
                           params.fraction_key)
    memory, held_queries = X[held.rest_rows], X[held.val_rows]
    val_inputs, test_inputs = ExactIndex(memory).search(held_queries, b), ExactIndex(X).search(queries, b)

    def test_run(labels: Hits, lam: float, tau: float, retrieval: RaeRetrieval | None = None) -> dict[str, Any]:
        hits = (retrieval or RaeRetrieval()).hits(test_inputs, labels, len(X), b)
        return evaluate_retrieval(Retrievals(hits, labels, test_inputs).rows, evaluator,
                                  EvalSettings(lam, b, tau, propensity_ab=ab))

    text_labels = {split: ExactIndex(Z).search(split_queries, b)  # searched once: baselines and the "text" kind
                   for split, split_queries in (("validation", held_queries), ("test", queries))}
    text_validation = ValidationRetrieval(val_inputs, text_labels["validation"], b, held, held.Y_rest)
    knn = knn_tau(text_validation, params.taus(), params.metric, ab)
    baseline = test_run(text_labels["test"], 0.5, knn["tau"])
    knn_values = baseline["per_instance"]["knn"]
    dual_values = baseline["per_instance"]["dual_encoder"]
    best_half = np.maximum(knn_values["P@1"], dual_values["P@1"])
    test = {"knn": {k: baseline["methods"]["knn"][k] for k in REPORTED},
            "dual_encoder": {k: baseline["methods"]["dual_encoder"][k] for k in REPORTED}}
    chosen: dict[str, Any] = {"knn": knn}
    tests: dict[str, Any] = {}
    for kind in label_key_kinds(alphas, epochs):
        if kind == "text":
            validation, test_labels = text_validation, text_labels["test"]
        else:
            val_keys = label_keys(kind, memory, held.Y_rest, Z, epochs)
            validation = ValidationRetrieval(val_inputs, ExactIndex(val_keys).search(held_queries, b), b, held,
                                             held.Y_rest)
            test_labels = ExactIndex(label_keys(kind, X, Y_train, Z, epochs)).search(queries, b)
        split = select(validation, dataclasses.replace(params, lam=None, tau=None, b=b, retrieval="split",
                                                       label_share=None), ab)
        run = test_run(test_labels, split["lambda"], split["tau"], rae_retrieval(split))
        key = f"split, label keys {kind}"
        chosen[key] = {k: split[k] for k in ("lambda", "tau", "label_share")} | {"val_P@1": split["val_value"]}
        test[key] = {k: run["methods"]["rae"][k] for k in REPORTED}
        tests[key] = paired_tests(run["per_instance"]["rae"], knn_values)
        if kind.startswith("prototypes"):
            continue  # the mixture's label half is a plain search of its keys: text and learned tell the story
        mix = choose_mixture(validation, validation.evaluator(ab), params.lambdas(), params.taus(), params.metric)
        ranked = evaluator.rank(len(queries), mixture_scorer(test_inputs, test_labels, Y_train, mix["lambda"],
                                                             mix["tau_x"], mix["tau_z"], b))
        metrics, per_query = evaluator.summary(ranked)
        key = f"mixture, label keys {kind}"
        chosen[key] = mix
        test[key] = {k: metrics[k] for k in REPORTED}
        tests[key] = paired_tests(per_query, knn_values)
        if kind == "learned":  # the label half alone, as a classifier
            alone = evaluator.summary(evaluator.rank(len(queries), lambda rows, hits=test_labels: dual_encoder_scores(
                hits[0][rows], hits[1][rows], Z.shape[0], PAPER_TAU, b)))[0]
            test["learned label keys alone"] = {k: alone[k] for k in REPORTED}
    return {
        "dataset": name, "command": " ".join(["python", *map(shlex.quote, sys.argv)]),
        "embeddings": json.loads((embeddings / "meta.json").read_text()).get("encoder"),
        "train_inputs": len(X), "labels": len(Z), "test_queries": len(queries), "b": b,
        "val_queries": len(held.val_rows), "learned_keys": {"epochs": epochs, "batch": BATCH, "lr": LEARNING_RATE,
                                                             "tau": PAPER_TAU},
        "oracle": {"P@1": round(100 * float(best_half.mean()), 2),
                   "dual_encoder_right_knn_wrong_percent":
                       round(100 * float(((dual_values["P@1"] > 0) & (knn_values["P@1"] == 0)).mean()), 2)},
        "chosen_on_validation": chosen, "test": test, "paired_t_tests_vs_knn": tests,
    }


if __name__ == "__main__":
    typer.run(main)
