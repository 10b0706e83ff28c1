"""rae-xmc: extreme multi-label classification with Retrieval-augmented Encoders.

One package per concept of the method. Imports flow one way, down LAYERS: a module imports from its
own layer and the layers below, never from one above (tests/test_layers.py checks every import
statement, those inside functions included).
"""

__version__ = "0.2.0"

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
    ("errors", "checks", "io", "params", "parallel",  # error types, range checks, atomic outputs, params, blocks on
     "numerics", "process_group"),                      # all cores, the CPU kernels every stage pins, torchrun's group
)
