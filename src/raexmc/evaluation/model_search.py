"""A packaged model measured on a dataset's test set, by the evaluate stage and `raexmc evaluate --model`: RAE's keys
from the model's own indexes as `raexmc predict` takes them, the baselines' from a search of every training input and
label. Where the evaluation searches otherwise than the folder as served, RAE is also scored as served on a sample."""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from ..data.dataset import Dataset
from ..errors import DataError
from ..memory.hnsw import resolve_threads
from ..memory.keys_values import training_values
from ..memory.merge import JointSearch, prefix
from ..rae.model import RaeModel
from ..settings import Settings
from .evaluator import Evaluator
from .methods import HEADLINE, KNN_B, baseline_depth, evaluate_retrieval
from .propensity import Propensity, chosen_propensity
from .retrievals import BlockSearch, Retrievals

SERVED_SAMPLE = 1000  # test queries the served search is scored on, where it is not the evaluated one


class ModelSearch:
    """A Search of `queries` for RAE at its b and every b of `b_sweep`, and for the baselines `baseline_depth` deep
    in `baselines`; `seconds` the time it took."""

    def __init__(self, model: RaeModel, baselines: JointSearch, queries: np.ndarray, b_sweep: list[int],
                 baseline_depth: int):
        self.model, self.baselines, self.queries = model, baselines, queries
        retrieval, b = model.settings.retrieval, model.settings.b
        self.swept_b = tuple(sorted({swept for swept in b_sweep if swept != b}))
        self.depths = {swept: retrieval.depth(swept) for swept in (b, *self.swept_b)}
        self.depth, self.baseline_depth = max(self.depths.values()), baseline_depth
        self.seconds = 0.0

    def __call__(self, rows: slice) -> Retrievals:
        started = time.perf_counter()
        queries = self.queries[rows]
        inputs, labels = self.model.search.search_parts(queries, self.depth)
        base_inputs, base_labels = self.baselines.search_parts(queries, self.baseline_depth)

        def keys_at(b: int) -> tuple[np.ndarray, np.ndarray]:
            depth = self.depths[b]  # the model's own retrieval at b: what it answers a query with
            return self.model.at(b=b).keys(prefix(inputs, depth), prefix(labels, depth))

        found = Retrievals(joint=keys_at(self.model.settings.b), labels=base_labels, inputs=base_inputs,
                           other_b={b: keys_at(b) for b in self.swept_b})
        self.seconds += time.perf_counter() - started
        return found

    def in_blocks(self) -> BlockSearch:
        block = max(self.model.search.query_block, self.baselines.query_block)
        return BlockSearch(self, block, len(self.queries))

    def queries_per_s(self) -> float:
        return round(len(self.queries) / max(self.seconds, 1e-9), 1)


def measure_model(model: RaeModel, data: Dataset, queries: np.ndarray, p: Settings, propensity: Propensity, *,
                  knn_tau: float, baselines: JointSearch | None = None,
                  served: RaeModel | None = None, chunk: int | None = None, progress: bool = False,
                  keep_scores: bool = False) -> tuple[dict[str, Any], dict[str, Any], float]:
    """(metrics.json's metrics but selection, evaluate_retrieval's result, queries/s) of `model` on `data`'s test
    set (`queries`), the baselines from `baselines` (default: the model's own indexes), as `p` says."""
    Y_values = training_values(data.label_matrix("train"), p.infer.relevance, copy=False)
    evaluator = Evaluator(Y_values, data.label_matrix("test"), data.filter_matrix("test"), propensity.ab)
    search = ModelSearch(model, baselines or model.search, queries, p.infer.b_sweep, baseline_depth(evaluator.exclude))
    result = evaluate_retrieval(search.in_blocks(), evaluator, model, p.infer.lambda_sweep, p.infer.b_sweep,
                                knn_tau, KNN_B, with_ova_knn=p.infer.ova_knn, chunk=chunk, progress=progress,
                                workers=resolve_threads(p.evaluate.threads), keep_scores=keep_scores)
    methods = result["methods"]
    metrics = {**methods, "knn": {**methods["knn"], "tau": knn_tau}, "memory": model.about.get("memory", {}),
               "propensity": propensity.record(),
               "retrieval": {"depth": search.depth, "baseline_depth": search.baseline_depth},
               "served": served_sample(model, served, queries, evaluator)}
    return metrics, result, search.queries_per_s()


def evaluate_folder(folder: str | os.PathLike, data: Dataset, p: Settings, propensity: Propensity | None = None,
                    keep_scores: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """`raexmc evaluate --model`: measure_model of the folder on `data`, its encoder embedding the test texts."""
    from ..encoder.device import embed_batch_size
    from ..memory.indexes import search_device

    device = search_device(p.search)
    model = RaeModel.load(folder, device)
    memory = model.about.get("memory", {})  # what the package stage recorded of the memory the folder holds
    if ((model.num_inputs, model.num_labels) != (data.size("train"), data.size("labels"))
            or memory.get("compression", "none") != "none" or memory.get("prototypes")):
        raise DataError(f"the model's {model.num_inputs} input and {model.num_labels} label keys are not the "
                        f"dataset's {data.size('train')} training inputs and {data.size('labels')} labels, each its "
                        "own: the baselines search those (a smaller, compressed or prototype memory holds others)",
                        folder)
    queries = embedded_queries(model, data, embed_batch_size(p.embed.batch_size, device), p.embed.dtype)
    knn_tau = model.about.get("selection", {}).get("knn_tau", model.settings.tau)  # the package stage's record
    served = served_model(folder, model, device)  # the folder as served, where evaluate searches otherwise
    metrics, result, _ = measure_model(
        model, data, queries, p, propensity or chosen_propensity(p.evaluate.propensity, data.names), knn_tau=knn_tau,
        served=served, progress=True, keep_scores=keep_scores)
    return metrics, result


def embedded_queries(model: RaeModel, data: Dataset, batch_size: int, dtype: str) -> np.ndarray:
    """`data`'s test inputs (float32), tokenized and embedded by the model's encoder as the embed stage does it."""
    from ..encoder.embedding import embed_tokens
    from ..encoder.tokens import record_input

    encoder = model.encoder
    ids, lengths = encoder.tokenize([record_input(record, model.input_fields, encoder.max_len)
                                     for record in data.texts("test")])
    vectors = np.empty((len(lengths), encoder.dim), np.dtype(dtype))
    embed_tokens(encoder, ids, lengths, vectors, batch_size, dtype, data.text_path("test"), "embed test")
    return vectors.astype(np.float32)


def per_instance_arrays(per_instance: dict[str, dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """evaluate_retrieval's per-instance values as per_instance.npz holds them: "method/metric" -> values."""
    return {f"{method}/{metric}": values for method, arrays in per_instance.items()
            for metric, values in arrays.items()}


def served_model(folder: str | os.PathLike, model: RaeModel, device: str) -> RaeModel | None:
    """The model of `folder` as served (on the CPU) where `model` on `device` searches otherwise (exact on a GPU)."""
    exact = "exact" in (model.search.inputs.backend, model.search.labels.backend)
    return RaeModel.load(folder, needs=("search",)) if device != "cpu" and exact else None


def served_sample(model: RaeModel, served: RaeModel | None, queries: np.ndarray,
                  evaluator: Evaluator) -> dict[str, Any]:
    """RAE's headline metrics on SERVED_SAMPLE evenly spaced test queries through `model`'s search and the `served`
    one's; {"same_search": 1} where `served` is None."""
    if served is None:
        return {"same_search": 1}
    rows = np.unique(np.linspace(0, len(queries) - 1, min(SERVED_SAMPLE, len(queries))).astype(np.int64))
    sample = Evaluator(evaluator.Y_train, evaluator.truth[rows], evaluator.exclude[rows], evaluator.propensity_ab)
    sampled = queries[rows]  # gathered once, for both searches and every chunk

    def headline(scored: RaeModel) -> dict[str, float]:
        summary, _ = sample.summary(sample.rank(len(rows), lambda chunk: scored.scores_for(sampled[chunk])))
        return {name: summary[name] for name in HEADLINE}

    return {"same_search": 0, "queries": len(rows), "evaluated": headline(model), "served": headline(served)}
