"""A fine-tuned encoder's tune stage validates on the training inputs fine-tuning held out (`train.val_fraction`,
`train.seed`), whatever `infer.val_fraction` and `infer.val_seed` say: any other split would choose λ, τ and the
memory on inputs the encoder was trained on. A zero-shot encoder validates on infer's split."""

from __future__ import annotations

import json
import re

import pytest

from raexmc.data.held_out import split_validation, tune_split
from raexmc.errors import ConfigError
from raexmc.settings import load_settings
from raexmc.training.settings import TrainSettings
from test_validation_folds import N_INPUTS, assert_curves_match, curve_of, pooled_brute_force, random_set
from tune_helpers import LAMBDAS, TAUS, run_stage, toy_params, write_training_split


def fine_tuned_params(folder, train_fraction: float, train_seed: int, **infer):
    """params.yaml with encoder.mode fine-tuned, training's split as given and these infer keys."""
    return toy_params(folder, **infer, **{"encoder.mode": "fine-tuned", "train.val_fraction": train_fraction,
                                          "train.seed": train_seed})


def test_the_split_follows_the_encoder_mode(tmp_path):
    zero_shot = tune_split(load_settings(toy_params(tmp_path, val_fraction=0.5, val_seed=4)))
    assert (zero_shot.fraction, zero_shot.seed, zero_shot.fraction_key) == (0.5, 4, "infer.val_fraction")
    fine_tuned = tune_split(load_settings(fine_tuned_params(tmp_path, 0.25, 3, val_fraction=0.5, val_seed=4)))
    assert (fine_tuned.fraction, fine_tuned.seed, fine_tuned.fraction_key) == (0.25, 3, "train.val_fraction")


@pytest.mark.parametrize(("fraction", "inputs", "says"), [
    (0.0, None, "train.val_fraction 0.0 holds out no input"),
    (0.05, 10, "train.val_fraction 0.05 of 10 training inputs holds out no input"),  # round(0.5) = 0, as numpy's
    (-0.1, None, "train.val_fraction: must be greater than or equal to 0, got -0.1"),  # the settings loader's
    (1.0, None, "train.val_fraction: must be less than 1, got 1.0"),
    (0.9999, 10, "train.val_fraction 0.9999 of 10 training inputs holds out every one, leaving none to fine-tune on"),
    (0.96, 10, "train.val_fraction 0.96 of 10 training inputs holds out every one"),  # round(9.6) = 10
])
def test_fine_tuning_that_holds_nothing_out_is_refused_naming_its_key(tmp_path, fraction, inputs, says):
    with pytest.raises(ConfigError, match=re.escape(says)) as error:
        tune_split(load_settings(fine_tuned_params(tmp_path, fraction, 0)), inputs and (lambda: inputs))
    assert error.value.record == "train.val_fraction"
    assert tune_split(load_settings(fine_tuned_params(tmp_path, 0.05, 0)), lambda: 30).fraction == 0.05  # round(1.5)
    assert tune_split(load_settings(fine_tuned_params(tmp_path, 0.94, 0)), lambda: 10).fraction == 0.94  # 1 left


def test_the_stage_validates_a_fine_tuned_encoder_on_the_inputs_training_held_out(tmp_path):
    """Training holds out 10 of the 40 inputs (0.25, seed 3), as the trainer draws them from its own settings;
    infer asks for 20 (0.5, seed 0). The curve is the brute force's over training's 10 against the other 30."""
    X, Z, Y = random_set()
    write_training_split(tmp_path, X, Z, Y)
    params = fine_tuned_params(tmp_path, 0.25, 3, **{"lambda": "auto", "val_fraction": 0.5, "val_seed": 0, "b": 45,
                                                    "val_folds": "auto", "lambda_sweep": LAMBDAS,
                                                    "tau_grid": list(TAUS)})
    proc = run_stage(tmp_path, params)
    assert proc.returncode == 0, proc.stderr
    chosen = json.loads((tmp_path / "tune" / "selection.json").read_text())

    trained = TrainSettings.from_section(load_settings(params).train, lambda: N_INPUTS)
    rest_rows, held_rows = split_validation(Y, trained.val_fraction, trained.seed)  # as training.train draws it
    assert (chosen["val_queries"], chosen["val_folds"], chosen["memory_inputs"]) == (10, 1, 30)
    assert (chosen["val_fraction"], chosen["val_seed"], chosen["val_split_from"]) == (0.25, 3, "train")
    assert_curves_match(curve_of(chosen), pooled_brute_force(X, Z, Y, [(rest_rows, held_rows)], b=45))


def test_the_stage_refuses_a_fine_tuned_encoder_with_nothing_held_out_in_one_line(tmp_path):
    X, Z, Y = random_set()
    write_training_split(tmp_path, X, Z, Y)
    proc = run_stage(tmp_path, fine_tuned_params(tmp_path, 0.0, 0, **{"lambda": "auto"}))
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]  # after the MLflow store's own start-up lines
    assert line.startswith(f"ConfigError: {tmp_path / 'params.yaml'}:train.val_fraction: "), line
    assert not (tmp_path / "tune").exists()
