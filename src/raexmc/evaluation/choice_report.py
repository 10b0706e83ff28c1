"""The tune stage's choice (its selection.json) as MLflow metrics and as one line for the user."""

from __future__ import annotations

from typing import Any

from .selection import choose
from .selection_file import Selection

CURVES = (("keep_curve", "keep"), ("prototypes_curve", "prototypes"))  # a selection's curves, by their axis


def choice_metrics(selection: Selection) -> dict[str, Any]:
    """The choice and each of its curves a point at a time; kNN's τ without its validation rows."""
    record = selection.record()  # the file's names, which the MLflow metrics keep
    # a curve one group per point ("keep_curve.0.25.P@1" and so on)
    curves = {name: {f"{row[axis]:g}": {k: v for k, v in row.items() if k != axis} for row in record[name]}
              for name, axis in CURVES if name in record}
    knn = selection.baselines.knn.model_dump(exclude_none=True, exclude={"validation"})
    return {**{k: v for k, v in record.items() if k not in ("validation", "baselines", *curves)}, **curves,
            "baselines": {"knn": knn}}


def point_name(row: dict[str, Any]) -> str:
    """A validation point named in full: "joint λ 0.5 τ 0.04" or "split share 0.25 λ 0.5 τ 0.04"."""
    share = row.get("label_share")
    return f"{'joint' if share is None else f'split share {share:g}'} λ {row['lambda']:g} τ {row['tau']:g}"


def memory_name(row: dict[str, Any]) -> str:
    """The memory's chosen keep and α of a selection or a curve's row, where there are some ("keep 0.5 α 0.25 ")."""
    return "".join(f"{name} {row[key]:g} " for key, name in (("keep", "keep"), ("prototypes", "α"))
                   if row.get(key) is not None)


def alternatives(selection: Selection) -> list[tuple[str, float]]:
    """What the choice was weighed against, named, with its validation value: the other retrieval's best, every
    other keep or α tried, the fixed point."""
    metric, rows = selection.metric, selection.validation
    lam, tau = (None if selection.auto[axis] else value for axis, value in (("lambda", selection.lam),
                                                                           ("tau", selection.tau)))
    named = []
    for joint in {row.get("label_share") is None for row in rows} - {selection.label_share is None}:
        best = choose([row for row in rows if (row.get("label_share") is None) == joint], metric, lam, tau)
        named.append((point_name(best), best[metric]))
    chosen = {"keep": selection.keep, "prototypes": selection.prototypes}
    for curve, axis in CURVES:  # a row of the α curve is at the chosen keep; one of the keep curve, at its own α
        named += [(memory_name({"keep": row.get("keep", selection.keep), "prototypes": row.get("prototypes")})
                   + point_name(row), row[metric])
                  for row in getattr(selection, curve) or [] if row[axis] != chosen[axis]]
    fixed = {"lambda": selection.fixed_lambda, "tau": selection.fixed_tau, "label_share": selection.fixed_label_share}
    return [*named, ("fixed " + point_name(fixed), selection.fixed_val_value)]


def choice_line(selection: Selection) -> str:
    """One line: what was chosen at which validation value, the alternatives and kNN's τ."""
    chosen = {"lambda": selection.lam, "tau": selection.tau, "label_share": selection.label_share,
              "keep": selection.keep, "prototypes": selection.prototypes}
    others = "; ".join(f"{name}: {value}" for name, value in alternatives(selection))
    return (f"tune chose {memory_name(chosen)}{point_name(chosen)} (validation {selection.metric} "
            f"{selection.val_value}; {others}); kNN τ {selection.knn_tau:g}")
