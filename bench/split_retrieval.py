"""RAE on the paper's joint top-b of [X; Z] against the split retrieval (the top label_share x b label keys and
the top rest input keys, each from its own search, one softmax), beside kNN and the dual encoder, on one
dataset's test set; and what the tune stage chooses for each on held-out training inputs.

    python bench/split_retrieval.py --name foldoc [--top-labels 600 --b 200 --tau 0.04 --lam 0.5
                                                   --shares 0.1,0.25,0.5,0.75,0.9 --label-tau-ratios 0.5,1,1.5]

Reads data/<name> and artifacts/<name>/embeddings (what the embed stage wrote: zero-shot by default), searches
exactly (ExactIndex), and reports the label keys' share of the joint top-b (and the queries whose joint top-b
holds no label key) and the mean similarity of the r-th nearest key of each set, then P@1, P@5, PSP@5, R@100 of
RAE at (--lam, --tau, b) for the joint retrieval and a split at each share, and of the two baselines. Then, as
the tune stage does with params.yaml's validation settings (on one held-out fold: infer.val_folds is not read;
training's split where its encoder.mode is fine-tuned, so that mode must say how the embeddings were made), chooses
λ and τ (joint) and λ, τ and the label share (split, share auto) on held-out training inputs, and scores the test
set at each choice. `--top-labels L` keeps only the dataset's L most frequent training labels (and the inputs that
have one of them): the few-labels regime (FOLDOC has more labels than inputs) from the same real data and
embeddings. Writes <root>/bench/results/split_retrieval_<name>[_top<L>][_<tag>].json: `--tag fine-tuned` names
the record of fine-tuned embeddings apart from the zero-shot one.

`comparison` sets the two choices side by side on the test set with kNN and the dual encoder, each from its own
search; kNN at its own τ, chosen on the same held-out inputs from the τ the split tried (kNN moves with τ as RAE
does; the dual encoder's ranking does not depend on τ), with paired t-tests (evaluation/significance.py) of the
split against each and of the joint retrieval against each baseline. `--label-tau-ratios` adds a probe of the split
with the label keys' logits at their own temperature τ_z = ratio x τ (one softmax: input keys at s/τ, label keys at
s/τ_z), λ and the ratio chosen on the same held-out inputs at the split's τ and share: whether the label half is
drowned by a mismatch of the two key sets' similarity scales.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import typer

from common import rerun_command
from raexmc.data.dataset import Dataset
from raexmc.data.held_out import query_sample, split_validation
from raexmc.encoder.vectors import load_embeddings
from raexmc.evaluation.evaluator import Evaluator
from raexmc.evaluation.methods import EvalSettings, evaluate_retrieval
from raexmc.evaluation.propensity import table_propensity
from raexmc.evaluation.retrievals import Retrievals
from raexmc.evaluation.selection import select
from raexmc.evaluation.selection_file import rae_retrieval
from raexmc.evaluation.significance import p_value_text, paired_ttest
from raexmc.evaluation.tune_settings import TuneSettings
from raexmc.evaluation.validation_memory import ValidationRetrieval, held_out_labels, validation_retrieval
from raexmc.memory.exact import ExactIndex
from raexmc.memory.keys_values import training_values
from raexmc.memory.merge import RaeRetrieval
from raexmc.memory.search import Hits
from raexmc.rae.scoring import PAPER_TAU, combine, knn_scores, score_parts
from raexmc.settings import load_settings

REPORTED = ("P@1", "P@5", "PSP@5", "R@100")
BASELINES = ("knn", "dual_encoder")


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


def label_temperature(hits: Hits, num_inputs: int, tau: float, label_tau: float) -> Hits:
    """RAE's keys with each label key's similarity scaled by tau / label_tau, so that one softmax at tau gives
    the input keys logits s / tau and the label keys s / label_tau."""
    ids, sims = hits
    return ids, np.where(ids >= num_inputs, sims * (tau / label_tau), sims).astype(np.float32)


def similarity_profile(inputs: Hits, labels: Hits, b: int) -> dict[str, dict[int, float]]:
    """The test queries' mean cosine similarity to their r-th nearest input key and label key: how far apart the
    two key sets' scales sit, which one softmax at τ turns into a weight ratio of exp(gap / τ)."""
    ranks = sorted({1, 10, 100, b})
    return {name: {rank: round(float(sims[:, rank - 1].mean(dtype=np.float64)), 4) for rank in ranks
                   if rank <= sims.shape[1] and np.isfinite(sims[:, rank - 1]).all()}  # a set holding rank keys
            for name, (_, sims) in (("input_keys", inputs), ("label_keys", labels))}


def paired_tests(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """Per reported metric, the paired t-test of two methods' per-query values (points), as the significance
    stage reports it: the mean difference, its 95% CI and p."""
    tests = {metric: paired_ttest(100 * ours[metric], 100 * theirs[metric]) for metric in REPORTED}
    return {metric: {"diff": round(t["mean_diff"], 2), "ci95": [round(t["ci_low"], 2), round(t["ci_high"], 2)],
                     "p": p_value_text(t)} for metric, t in tests.items()}


def temperature_probe(validation: ValidationRetrieval, chosen: dict[str, Any], ratios: list[float],
                      lambdas: list[float], metric: str, ab: tuple[float, float]) -> dict[str, Any]:
    """The best (λ, τ_z = ratio x τ) on the held-out inputs for the split at the chosen τ and share (ties: the
    ratio nearest 1)."""
    tau, retrieval, b = chosen["tau"], rae_retrieval(chosen), validation.b
    label_taus = [float(f"{ratio * tau:.10g}") for ratio in ratios]
    evaluator = validation.evaluator(ab)
    hits = validation.hits(tau, retrieval)
    curve = []
    for label_tau in label_taus:
        ids, sims = label_temperature(hits, validation.input_keys, tau, label_tau)
        knn_part, label_part = score_parts(ids, sims, evaluator.rae_values, tau, b)  # a few thousand queries
        for lam in lambdas:
            ranked = evaluator.rank(len(ids), partial(mixed, knn_part, label_part, lam))
            curve.append({"lambda": lam, "label_tau": label_tau, metric: evaluator.summary(ranked)[0][metric]})
    best = max(curve, key=lambda row: (row[metric], -abs(math.log(row["label_tau"] / tau))))
    return {"tau": tau, "label_share": chosen["label_share"], "lambda": best["lambda"], "label_tau": best["label_tau"],
            f"val_{metric}": best[metric], "curve": curve}


def knn_tau(validation: ValidationRetrieval, taus: list[float], metric: str, ab: tuple[float, float]) -> dict[str, Any]:
    """kNN's τ chosen on the held-out inputs (its own search over the remaining inputs), as RAE's is (ties: the
    paper's 0.04 nearest by ratio)."""
    evaluator, (ids, sims), b = validation.evaluator(ab), validation.inputs, validation.b
    curve = [{"tau": tau, metric: evaluator.summary(evaluator.rank(
        len(ids), lambda rows, tau=tau: knn_scores(ids[rows], sims[rows], evaluator.Y_train, tau, b)))[0][metric]}
        for tau in taus]
    best = max(curve, key=lambda row: (row[metric], -abs(math.log(row["tau"] / PAPER_TAU))))
    return {"tau": best["tau"], f"val_{metric}": best[metric], "curve": curve}


def mixed(knn_part: Any, label_part: Any, lam: float, rows: slice) -> Any:
    """RAE's scores at λ of some queries, from the score halves of all of them."""
    return combine((knn_part[rows], label_part[rows]), lam)


def main(name: str = "foldoc", root: Path = Path("."), b: int = 200, tau: float = 0.04, lam: float = 0.5,
         shares: str = "0.1,0.25,0.5,0.75,0.9", top_labels: int = 0, label_tau_ratios: str = "",
         tag: str = typer.Option("", help="Suffix of the record's name (letters, digits, '.', '_', '-'), so that "
                                          "runs on other embeddings of the same dataset keep their own record.")
         ) -> None:
    if tag and not re.fullmatch(r"[A-Za-z0-9._-]+", tag):
        raise typer.BadParameter(f"{tag!r}: use letters, digits, '.', '_' or '-'", param_hint="--tag")
    suffix = (f"_top{top_labels}" if top_labels else "") + (f"_{tag}" if tag else "")
    out = root / "bench" / "results" / f"split_retrieval_{name}{suffix}.json"
    out.parent.mkdir(parents=True, exist_ok=True)  # before the work: a root without the folder used to fail at the end
    started = time.perf_counter()
    dataset = Dataset(root / "data" / name)
    ab = table_propensity(dataset.names).ab
    with tempfile.TemporaryDirectory() as scratch:
        report = measure(dataset, root, name, b, tau, lam, shares, top_labels, ab, Path(scratch),
                         [float(r) for r in label_tau_ratios.split(",") if r])
    report["seconds"] = round(time.perf_counter() - started, 1)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


def measure(dataset: Dataset, root: Path, name: str, b: int, tau: float, lam: float, shares: str, top_labels: int,
            ab: tuple[float, float], scratch: Path, label_tau_ratios: list[float]) -> dict[str, Any]:
    source = root / "artifacts" / name / "embeddings"
    data = few_labels(dataset, source, top_labels, scratch / "embeddings")
    embeddings, X, Z, queries = scratch / "embeddings", data["X"], data["Z"], data["queries"]
    Y_train = training_values(data["Y"]["train"], copy=False)
    evaluator = Evaluator(Y_train, data["Y"]["test"], data["filters"]["test"], ab)
    inputs, labels = ExactIndex(X).search(queries, b), ExactIndex(Z).search(queries, b)

    def test_run(retrieval: RaeRetrieval, lam: float, tau: float, label_tau: float | None = None) -> dict[str, Any]:
        """RAE's and the baselines' metrics at (λ, τ) and their per-query values; label keys at label_tau if given."""
        hits = retrieval.hits(inputs, labels, len(X), b)
        if label_tau is not None:
            hits = label_temperature(hits, len(X), tau, label_tau)
        found = Retrievals(hits, labels, inputs)
        return evaluate_retrieval(found.rows, evaluator, EvalSettings(lam, b, tau, propensity_ab=ab))

    def test_metrics(retrieval: RaeRetrieval, lam: float, tau: float) -> dict[str, dict[str, float]]:
        methods = test_run(retrieval, lam, tau)["methods"]
        return {method: {k: methods[method][k] for k in REPORTED} for method in ("rae", "dual_encoder", "knn")}

    joint_ids = RaeRetrieval().hits(inputs, labels, len(X), b)[0][:, :b]
    label_keys = (joint_ids >= len(X)).sum(axis=1)
    joint = test_metrics(RaeRetrieval(), lam, tau)
    rows = {"joint": joint["rae"], **{f"split {share}": test_metrics(RaeRetrieval("split", share), lam, tau)["rae"]
                                      for share in map(float, shares.split(","))}}

    params = TuneSettings.from_settings(load_settings(root / "params.yaml"))
    Y_all = data["Y"]["train"]
    rest_rows, held_rows = split_validation(Y_all, params.val_fraction, params.val_seed)
    held = held_out_labels(Y_all, data["filters"]["train"], rest_rows,
                           query_sample(held_rows, params.val_max_queries, params.val_seed), params.relevance,
                           params.fraction_key)
    validation = validation_retrieval(embeddings, held, b)
    tuned, runs, choices = {}, {}, {}
    for mode in ("joint", "split"):
        settings = dataclasses.replace(params, lam=None, tau=None, b=b, retrieval=mode,
                                       label_share=None if mode == "split" else params.label_share)
        chosen = choices[mode] = select(validation, settings, ab)
        runs[mode] = test_run(rae_retrieval(chosen), chosen["lambda"], chosen["tau"])
        tuned[mode] = {"lambda": chosen["lambda"], "tau": chosen["tau"], "label_share": chosen["label_share"],
                       "val_P@1": chosen["val_value"], "curve_points": len(chosen["validation"]),
                       "taus_tried": sorted({r["tau"] for r in chosen["validation"]}),
                       "test": {k: runs[mode]["methods"]["rae"][k] for k in REPORTED}}
    knn = knn_tau(validation, tuned["split"]["taus_tried"], params.metric, ab)
    runs["knn"] = test_run(RaeRetrieval(), lam, knn["tau"])
    baselines = {"knn": runs["knn"], "dual_encoder": runs["split"]}
    split = runs["split"]["per_instance"]
    against = {"joint": runs["joint"]["per_instance"]["rae"],
               **{m: baselines[m]["per_instance"][m] for m in BASELINES}}
    comparison = {
        "knn_tau_on_validation": knn,
        "test": {"joint": tuned["joint"]["test"], "split (auto)": tuned["split"]["test"],
                 **{m: {k: baselines[m]["methods"][m][k] for k in REPORTED} for m in BASELINES}},
        "paired_t_tests": {**{f"split_vs_{other}": paired_tests(split["rae"], values)
                              for other, values in against.items()},
                           **{f"joint_vs_{m}": paired_tests(runs["joint"]["per_instance"]["rae"], against[m])
                              for m in BASELINES}},
    }
    if label_tau_ratios:
        probe = temperature_probe(validation, choices["split"], label_tau_ratios, params.lambdas(), params.metric, ab)
        probed = test_run(rae_retrieval(choices["split"]), probe["lambda"], probe["tau"], probe["label_tau"])
        probe["test"] = {k: probed["methods"]["rae"][k] for k in REPORTED}
        probe["paired_t_tests"] = {f"vs_{other}": paired_tests(probed["per_instance"]["rae"], values)
                                   for other, values in {**against, "split": split["rae"]}.items()}
        comparison["label_temperature_probe"] = probe

    return {
        "dataset": name, "command": rerun_command(),
        "embeddings": json.loads((source / "meta.json").read_text()).get("encoder"),
        "top_labels": top_labels or "all", "train_inputs": len(X), "labels": len(Z), "test_queries": len(queries),
        "b": b, "tau": tau, "lambda": lam,
        "joint_top_b": {"label_key_share_percent": round(100 * float(label_keys.mean()) / b, 2),
                        "queries_without_label_key_percent": round(100 * float((label_keys == 0).mean()), 2)},
        "mean_similarity_at_rank": similarity_profile(inputs, labels, b),
        "test": {"rae": rows, "dual_encoder": joint["dual_encoder"], "knn": joint["knn"]},
        "tuned_on_validation": {"val_queries": len(held.val_rows), **tuned},
        "comparison": comparison,
    }


if __name__ == "__main__":
    typer.run(main)
