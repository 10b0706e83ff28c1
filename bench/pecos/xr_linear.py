"""PECOS XR-Linear (TF-IDF features) on one of our dataset folders, scored with our metric code.

    bench/pecos/setup.sh
    PYTHONPATH=src bench/.venv-pecos/bin/python bench/pecos/xr_linear.py --name foldoc

Trains on data/<name> (train split: input text = title + content, like tokenize.input_fields's
default), predicts the top 100 labels of every test input, applies the same reciprocal-pair filter
and metrics as the evaluate stage, and writes bench/results/xr_linear_<name>.json.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import typer

from raexmc.evaluation.macro_f1 import macro_f1_by_segment
from raexmc.evaluation.metrics import per_instance_metrics, summarize
from raexmc.evaluation.propensity import propensities, propensity_ab
from raexmc.rae.pairs import remove_pairs
from raexmc.rae.ranking import top_k


def texts(path: Path) -> list[str]:
    with open(path, encoding="utf-8") as handle:
        return [f"{r['title']} {r['content']}".strip() for r in map(json.loads, handle)]


def main(name: str = "foldoc", beam_size: int = 10) -> None:
    from pecos.utils.featurization.text.preprocess import Preprocessor
    from pecos.xmc import Indexer, LabelEmbeddingFactory
    from pecos.xmc.xlinear.model import XLinearModel

    folder = Path("data") / name
    Y_train = sp.load_npz(folder / "Y_train.npz").tocsr().astype(np.float32)
    Y_test = sp.load_npz(folder / "Y_test.npz").tocsr()
    exclude = sp.load_npz(folder / "filter_test.npz").tocsr()
    started = time.perf_counter()
    preprocessor = Preprocessor.train(texts(folder / "train.jsonl"), {"type": "tfidf", "kwargs": {}})
    X_train = preprocessor.predict(texts(folder / "train.jsonl"))
    X_test = preprocessor.predict(texts(folder / "test.jsonl"))
    # labels no training input has get no feature vector; PIFA then leaves them at the origin
    label_features = LabelEmbeddingFactory.create(Y_train, X_train, method="pifa")
    model = XLinearModel.train(X_train, Y_train, C=Indexer.gen(label_features))
    train_s = time.perf_counter() - started
    scores = model.predict(X_test, beam_size=beam_size, only_topk=100 + 1).tocsr()
    ranked = top_k(scores, 100, exclude=exclude)
    truth = remove_pairs(Y_test, exclude)
    freq = np.bincount(Y_train.indices, minlength=Y_train.shape[1])
    A, B = propensity_ab(name)
    summary = summarize(per_instance_metrics(ranked, truth, propensity=propensities(freq, Y_train.shape[0], A, B)))
    f1 = macro_f1_by_segment(ranked, truth, freq, k=5)
    summary["macro-F1@5"] = {k: (round(100 * v, 2) if np.isfinite(v) else None) for k, v in f1.items()}
    report = {"dataset": name, "model": "PECOS XR-Linear (TF-IDF, PIFA, default settings)", "beam_size": beam_size,
              "train_s": round(train_s, 1), "metrics": summary}
    Path("bench/results").mkdir(parents=True, exist_ok=True)
    (Path("bench/results") / f"xr_linear_{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    typer.run(main)
