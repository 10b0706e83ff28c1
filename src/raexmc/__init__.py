"""rae-xmc: extreme multi-label classification with Retrieval-augmented Encoders. The public API is __all__, each
name loaded on first use (PEP 562), so `import raexmc` imports neither torch nor numpy. Imports flow one way, down
LAYERS, with no circles (tests/test_layers.py)."""

from importlib import import_module

__version__ = "0.2.0"

# Each public name and the module it comes from, imported when the name is first read.
_EXPORTS = {
    "RaeModel": "raexmc.rae.model",                   # a packaged model: RaeModel.load(folder), .predict(texts, k)
    "build_model": "raexmc.rae.build",                # a zero-shot model from texts or a dataset folder, no DVC
    "fine_tune": "raexmc.training.fine_tune",         # that model of an encoder fine-tuned on them first
    "score_files": "raexmc.evaluation.score_report",  # metrics (and paired t-tests) of score files on a dataset
    "per_instance_metrics": "raexmc.evaluation.metrics",
    "summarize": "raexmc.evaluation.metrics",
    "macro_f1_by_segment": "raexmc.evaluation.metrics",
    "propensities": "raexmc.evaluation.propensity",
    "paired_ttest": "raexmc.evaluation.significance",
}
__all__ = ["RaeModel", "build_model", "fine_tune", "score_files", "per_instance_metrics", "summarize",
           "macro_f1_by_segment", "propensities", "paired_ttest", "__version__"]


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'raexmc' has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name]), name)
    globals()[name] = value  # read once: later reads find it here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})

# The layers, top to bottom; each names the packages or modules directly under raexmc that it holds.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("cli",),                    # the `raexmc` command
    ("pipeline",),               # stage runner, MLflow tracking, serving, sweeps, plots
    ("training",),               # fine-tuning the encoder; validates with the evaluator
    ("evaluation",),             # metrics, the evaluator of RAE and its baselines, significance
    ("rae",),                    # the RAE model (softmax over retrieved keys · V), top-k ranking, its saved folder
    ("memory",),                 # keys K = [X; Z], values, nearest-key indexes
    ("encoder",),                # load the model with its pooling, tokenise, embed
    ("data",),                   # datasets: sources, layouts, the catalogue, label-frequency segments
    ("errors", "checks", "io", "settings", "parallel",  # error types, range checks, atomic outputs, settings, blocks on
     "numerics", "process_group", "progress"),          # all cores, the CPU kernels every stage pins, torchrun's group,
)                                                       # progress bars (lines in a log)
