"""The model card a saved RaeModel carries as README.md: what it is, where it came from (the `about` the package
stage gives it: dataset, metrics, params, commit) and how to load it, readable without the project around it."""

from __future__ import annotations

import json
from typing import Any

USAGE = """```python
from raexmc.rae.model import RaeModel

model = RaeModel.load("{name}")
answers, _ = model.predict(["a query text"], k=5)
```

or `raexmc predict --model {name} "a query text"`."""


def model_card(model: Any, settings: dict[str, Any]) -> str:
    """README.md of a saved RaeModel (rae/model.py) whose settings.json holds `settings`."""
    about = dict(settings["about"])
    dataset = about.pop("dataset", None)
    metrics = about.pop("metrics", None)
    search = model.search
    lines = [f"# RAE-XMC model{f': {dataset}' if dataset else ''}", "",
             "Extreme multi-label classification by a retrieval-augmented encoder (RAE-XMC): a query's b nearest keys "
             "among the training inputs and the labels, p = softmax(q.k / tau), label scores lambda * p.V + "
             "(1 - lambda) * p (label keys).", "",
             "## Use", "", USAGE.format(name="<this folder>"), "",
             "## Model", "",
             f"- {model.num_inputs} input keys, {model.num_labels} labels"
             + ("" if search is None else f"; indexes: {search.inputs.backend} (inputs), {search.labels.backend} "
                                          f"(labels), ef_search {settings['ef_search']}"),
             f"- lambda {'per query (query_lambda.json), fallback ' if settings['query_lambda'] else ''}"
             f"{settings['lambda']}, tau {settings['tau']}, b {settings['b']}, retrieval {settings['retrieval']}"
             + ("" if settings["label_share"] is None else f" (label share {settings['label_share']})"),
             f"- prior (tau * log n on merged keys): {'on' if settings['prior'] else 'off'}",
             f"- encoder: encoder/ (sentence-transformers layout), inputs as {settings['input_fields']}, "
             f"max length {settings['input_max_len']}"]
    if metrics:
        lines += ["", "## Test-set metrics", "", "| metric | value |", "|---|---|",
                  *(f"| {name} | {value} |" for name, value in metrics.items())]
    if about:
        lines += ["", "## Provenance", "", *(f"- {key}: {_text(value)}" for key, value in about.items())]
    return "\n".join(lines) + "\n"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
