"""fine_tune (training/fine_tune.py): the train stage's recipe in this process, at params.yaml's train section, then
build_model of the trained encoder."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import logsumexp

from raexmc import RaeModel, fine_tune
from raexmc.encoder.text_encoder import TextEncoder
from raexmc.errors import ConfigError
from raexmc.settings import load_settings
from raexmc.training.fine_tune import TRAIN
from tests.helpers import LABELS, REPO, TINY_TRAIN
from tests.helpers import TRAIN as TRAINING_INPUTS

TINY = {**TINY_TRAIN, "max_steps": 4, "hnm_steps": 2, "precision": "fp32"}  # fp32 on every CPU


def test_the_fine_tune_defaults_are_params_yaml_s_train_section():
    assert TRAIN == load_settings(REPO / "params.yaml").train


def label_loss(encoder) -> float:
    """The mean over training (input, label) pairs of -log softmax(q.z / 0.04) of the label among all labels: the
    dual-encoder part of the training loss, in numpy from the encoder's vectors of the texts."""
    queries = encoder.embed_texts([f"{title} {content}" for _, title, content, _, _ in TRAINING_INPUTS])
    logits = queries @ encoder.embed_texts([title for _, title, _ in LABELS]).T / 0.04
    log_softmax = logits - logsumexp(logits, axis=1, keepdims=True)
    return float(-np.mean([log_softmax[row, label] for row, (*_, labels, _) in enumerate(TRAINING_INPUTS)
                           for label in labels]))


def test_a_fine_tuned_model_has_a_lower_training_loss_and_saves_loads_and_predicts(tmp_path, lf_folder, tiny_model):
    model = fine_tune(tiny_model, dataset=lf_folder, out=tmp_path / "model", train=TINY, device="cpu")
    base = label_loss(TextEncoder.load(tiny_model, "cpu", "fp32", 128))
    assert label_loss(model.encoder) < base - 0.1, "4 steps at lr 1e-3 take it from 1.67 to 1.34"
    answers, _ = model.predict(["python scripting"], k=5)
    assert sorted(answer["id"] for answer in answers[0]) == ["l0", "l1", "l2", "l3", "l4"]
    assert RaeModel.load(tmp_path / "model").predict(["python scripting"], k=5)[0] == answers


def test_a_bad_train_key_is_one_config_error_naming_it(tmp_path, tiny_model):
    with pytest.raises(ConfigError, match=r"train\.max_step"):
        fine_tune(tiny_model, ["a"], [[0]], ["b"], out=tmp_path / "model", train={"max_step": 2})
    assert not (tmp_path / "model").exists()
