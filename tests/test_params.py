"""params.yaml loading: YAML 1.2 numbers as `dvc exp run -S` writes them, and clear errors."""

from __future__ import annotations

import pytest

from raexmc.errors import ConfigError
from raexmc.params import load_params

from conftest import REPO


def test_yaml_1_2_floats(tmp_path):
    (tmp_path / "params.yaml").write_text("train:\n  lr: 1e-4\n  other: 3.0e-4\n  steps: 10\n")
    params = load_params(tmp_path / "params.yaml")
    assert params.typed("train.lr", float) == pytest.approx(1e-4)
    assert params.typed("train.steps", float) == 10.0


def test_missing_and_mistyped_keys_name_the_key(tmp_path):
    (tmp_path / "params.yaml").write_text("train:\n  steps: ten\n")
    params = load_params(tmp_path / "params.yaml")
    with pytest.raises(ConfigError, match=r"params.yaml:train.lr: missing parameter 'train.lr'"):
        params.get("train.lr")
    with pytest.raises(ConfigError, match="'train.steps' must be int, got 'ten'"):
        params.typed("train.steps", int)
    assert params.get("train.lr", 0.1) == 0.1


def test_invalid_yaml_names_the_line(tmp_path):
    (tmp_path / "params.yaml").write_text("a: 1\nb: [unclosed\n")
    with pytest.raises(ConfigError, match=r"params.yaml:\d+: invalid YAML"):
        load_params(tmp_path / "params.yaml")


def test_project_params_load():
    params = load_params(REPO / "params.yaml")
    assert params.typed("data.name", str) in params.section("datasets")
    for name, preset in params.section("presets").items():
        assert preset["data.name"] == name and name in params.section("datasets")
