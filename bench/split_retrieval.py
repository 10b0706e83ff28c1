"""RAE on the paper's joint top-b of [X; Z] against the split retrieval (the top label_share x b label keys and
the top rest input keys, each from its own search, one softmax), beside kNN and the dual encoder, on one
dataset's test set; and what the tune stage chooses for each on held-out training inputs.

    python bench/split_retrieval.py --name foldoc [--top-labels 600 --b 200 --tau 0.04 --lam 0.5
                                                   --shares 0.1,0.25,0.5,0.75,0.9]

Reads data/<name> and artifacts/<name>/embeddings (what the embed stage wrote: zero-shot by default), searches
exactly (ExactIndex), and reports the label keys' share of the joint top-b (and the queries whose joint top-b
holds no label key), then P@1, P@5, R@100 of RAE at (--lam, --tau, b) for the joint retrieval and a split at
each share, and of the two baselines. Then, as the tune stage does with params.yaml's validation settings,
chooses λ and τ (joint) and λ, τ and the label share (split, share auto) on held-out training inputs, and
scores the test set at each choice. `--top-labels L` keeps only the dataset's L most frequent training labels
(and the inputs that have one of them): the few-labels regime (FOLDOC has more labels than inputs) from
the same real data and embeddings. Writes <root>/bench/results/split_retrieval_<name>[_top<L>].json.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import typer

from raexmc.data.dataset import Dataset
from raexmc.encoder.vectors import load_embeddings
from raexmc.evaluation.evaluator import EvalSettings, Evaluator, Retrievals, evaluate_retrieval
from raexmc.evaluation.propensity import table_propensity
from raexmc.evaluation.selection import TuneSettings, held_out_labels, rae_retrieval, select, validation_retrieval
from raexmc.memory.exact import ExactIndex
from raexmc.memory.keys_values import training_values
from raexmc.memory.merge import RaeRetrieval
from raexmc.params import load_params
from raexmc.training.batches import query_sample, split_validation

REPORTED = ("P@1", "P@5", "R@100")


def few_labels(dataset: Dataset, embeddings: Path, top_labels: int, folder: Path) -> dict[str, Any]:
    """The dataset's label matrices, filters and embeddings restricted to its `top_labels` most frequent training
    labels (all when 0), and the inputs that keep at least one of them; the embeddings written to `folder` as
    the embed stage lays them out (the tune stage's validation search reads them from there)."""
    Y = {split: dataset.label_matrix(split) for split in ("train", "test")}
    filters = {split: dataset.filter_matrix(split) for split in ("train", "test")}
    vectors = {split: np.asarray(load_embeddings(embeddings, split), dtype=np.float32)
               for split in ("train", "test", "labels")}
    columns = np.arange(Y["train"].shape[1])
    if top_labels:
        columns = np.sort(np.argsort(-np.asarray((Y["train"] > 0).sum(axis=0)).ravel(), kind="stable")[:top_labels])
    vectors["labels"] = vectors["labels"][columns]
    for split in ("train", "test"):
        kept = Y[split][:, columns].getnnz(axis=1) > 0
        Y[split], filters[split] = Y[split][kept][:, columns], filters[split][kept][:, columns]
        vectors[split] = vectors[split][kept]
    folder.mkdir(parents=True, exist_ok=True)
    for split, array in vectors.items():
        np.save(folder / f"{split}.npy", array)
    return {"Y": Y, "filters": filters, "X": vectors["train"], "Z": vectors["labels"], "queries": vectors["test"]}


def main(name: str = "foldoc", root: Path = Path("."), b: int = 200, tau: float = 0.04, lam: float = 0.5,
         shares: str = "0.1,0.25,0.5,0.75,0.9", top_labels: int = 0) -> None:
    started = time.perf_counter()
    dataset = Dataset(root / "data" / name)
    ab = table_propensity(dataset.names).ab
    with tempfile.TemporaryDirectory() as scratch:
        report = measure(dataset, root, name, b, tau, lam, shares, top_labels, ab, Path(scratch))
    report["seconds"] = round(time.perf_counter() - started, 1)
    suffix = f"_top{top_labels}" if top_labels else ""
    out = root / "bench" / "results" / f"split_retrieval_{name}{suffix}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


def measure(dataset: Dataset, root: Path, name: str, b: int, tau: float, lam: float, shares: str, top_labels: int,
            ab: tuple[float, float], scratch: Path) -> dict[str, Any]:
    source = root / "artifacts" / name / "embeddings"
    data = few_labels(dataset, source, top_labels, scratch / "embeddings")
    embeddings, X, Z, queries = scratch / "embeddings", data["X"], data["Z"], data["queries"]
    Y_train = training_values(data["Y"]["train"], copy=False)
    evaluator = Evaluator(Y_train, data["Y"]["test"], data["filters"]["test"], ab)
    inputs, labels = ExactIndex(X).search(queries, b), ExactIndex(Z).search(queries, b)

    def test_metrics(retrieval: RaeRetrieval, lam: float, tau: float) -> dict[str, dict[str, float]]:
        found = Retrievals(retrieval.hits(inputs, labels, len(X), b), labels, inputs)
        methods = evaluate_retrieval(found.rows, evaluator, EvalSettings(lam, b, tau, propensity_ab=ab))["methods"]
        return {method: {k: methods[method][k] for k in REPORTED} for method in ("rae", "dual_encoder", "knn")}

    joint_ids = RaeRetrieval().hits(inputs, labels, len(X), b)[0][:, :b]
    label_keys = (joint_ids >= len(X)).sum(axis=1)
    joint = test_metrics(RaeRetrieval(), lam, tau)
    rows = {"joint": joint["rae"], **{f"split {share}": test_metrics(RaeRetrieval("split", share), lam, tau)["rae"]
                                      for share in map(float, shares.split(","))}}

    params = TuneSettings.from_params(load_params(root / "params.yaml"))
    Y_all = data["Y"]["train"]
    rest_rows, held_rows = split_validation(Y_all, params.val_fraction, params.val_seed)
    held = held_out_labels(Y_all, data["filters"]["train"], rest_rows,
                           query_sample(held_rows, params.val_max_queries, params.val_seed), params.relevance)
    validation = validation_retrieval(embeddings, held, b)
    tuned = {}
    for mode in ("joint", "split"):
        settings = dataclasses.replace(params, lam=None, tau=None, b=b, retrieval=mode,
                                       label_share=None if mode == "split" else params.label_share)
        chosen = select(validation, settings, ab)
        retrieval = rae_retrieval(chosen)
        tuned[mode] = {"lambda": chosen["lambda"], "tau": chosen["tau"], "label_share": chosen["label_share"],
                       "val_P@1": chosen["val_value"], "curve_points": len(chosen["validation"]),
                       "taus_tried": sorted({r["tau"] for r in chosen["validation"]}),
                       "test": test_metrics(retrieval, chosen["lambda"], chosen["tau"])["rae"]}

    return {
        "dataset": name, "command": " ".join(["python", *map(shlex.quote, sys.argv)]),
        "embeddings": json.loads((source / "meta.json").read_text()).get("encoder"),
        "top_labels": top_labels or "all", "train_inputs": len(X), "labels": len(Z), "test_queries": len(queries),
        "b": b, "tau": tau, "lambda": lam,
        "joint_top_b": {"label_key_share_percent": round(100 * float(label_keys.mean()) / b, 2),
                        "queries_without_label_key_percent": round(100 * float((label_keys == 0).mean()), 2)},
        "test": {"rae": rows, "dual_encoder": joint["dual_encoder"], "knn": joint["knn"]},
        "tuned_on_validation": {"val_queries": len(held.val_rows), **tuned},
    }


if __name__ == "__main__":
    typer.run(main)
