"""The model card a saved RaeModel carries as README.md: what it is, where it came from (`about`) and how to
load it, readable without the project around it.
"""

from __future__ import annotations

import json
from typing import Any

USAGE = """```python
from raexmc import RaeModel

model = RaeModel.load("{name}")
answers, _ = model.predict(["a query text"], k=5)
```

or `raexmc predict --model {name} "a query text"`."""


def model_card(model: Any, settings: dict[str, Any]) -> str:
    """README.md of a saved RaeModel (rae/model.py) whose settings.json holds `settings`."""
    about = dict(settings["about"])
    dataset, metrics = about.pop("dataset", None), about.pop("metrics", None)
    lines = [f"# RAE-XMC model{f': {dataset}' if dataset else ''}", "",
             "Extreme multi-label classification by a retrieval-augmented encoder (RAE-XMC): a query's b nearest keys "
             "among the training inputs and the labels, p = softmax(q.k / tau), label scores lambda * p.V + "
             "(1 - lambda) * p (label keys).", "",
             "## Use", "", USAGE.format(name="<this folder>"), "",
             "## Model", "",
             f"- {model.num_inputs} input keys, {model.num_labels} labels{_indexes(model.search, settings)}",
             f"- lambda {'per query (query_lambda.json), fallback ' if settings['query_lambda'] else ''}"
             f"{settings['lambda']}, tau {settings['tau']}, b {settings['b']}, retrieval {settings['retrieval']}"
             + ("" if settings["label_share"] is None else f" (label share {settings['label_share']})"),
             f"- prior (tau * log n on merged keys): {'on' if settings['prior'] else 'off'}",
             "- encoder: none" if model.encoder is None else
             f"- encoder: encoder/ (sentence-transformers layout), inputs as {settings['input_fields']}, "
             f"max length {settings['input_max_len']} tokens"]
    if metrics:
        lines += ["", "## Metrics", "", "| metric | value |", "|---|---|",
                  *(f"| {name} | {value} |" for name, value in metrics.items())]
    if about:
        lines += ["", "## Provenance", "", *(f"- {key}: {_text(value)}" for key, value in about.items())]
    return "\n".join(lines) + "\n"


def _indexes(search: Any, settings: dict[str, Any]) -> str:
    """The indexes' part of the card's first line (a graph's beam too)."""
    if search is None:
        return ""
    backends = (search.inputs.backend, search.labels.backend)
    beam = f", ef_search {settings['ef_search']}" if set(backends) - {"exact"} else ""
    return f"; indexes: {backends[0]} (inputs), {backends[1]} (labels){beam}"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)
