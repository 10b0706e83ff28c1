"""params.yaml loading: YAML 1.2 numbers as `dvc exp run -S` writes them, and clear errors."""

from __future__ import annotations

import json

import pytest

from conftest import REPO
from raexmc.checks import positive_int
from raexmc.errors import PARAMS_FILE, ConfigError, DataError
from raexmc.params import KNOWN_KEYS, load_params


def test_yaml_1_2_floats(tmp_path):
    (tmp_path / "params.yaml").write_text("train:\n  lr: 1e-4\n  other: 3.0e-4\n  steps: 10\n")
    params = load_params(tmp_path / "params.yaml")
    assert params.typed("train.lr", float) == pytest.approx(1e-4, abs=1e-15)
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
    presets = dict(params.section("presets"))
    assert "data.name" not in presets.pop("paper-inference"), "the paper's inference applies to the run's dataset"
    for name, preset in presets.items():   # a benchmark's preset runs on the benchmark it is named after
        assert preset["data.name"] == name and name in params.section("datasets")


def test_a_typo_in_a_section_is_refused_with_its_key(tmp_path):
    (tmp_path / "params.yaml").write_text("infer:\n  lambda: 0.5\n  lamda: 0.3\n")
    with pytest.raises(ConfigError, match=r"params.yaml:infer.lamda: unknown parameter 'infer.lamda'"):
        load_params(tmp_path / "params.yaml")


def test_every_preset_key_is_a_known_parameter():
    params = load_params(REPO / "params.yaml")
    for preset in params.section("presets").values():
        for dotted in preset:
            section, key = dotted.split(".", 1)
            assert section not in KNOWN_KEYS or key in KNOWN_KEYS[section], dotted


@pytest.mark.parametrize("value", [-1, 2.5, "3", True])
def test_a_bounded_integer_refuses_what_is_not_one(tmp_path, value):
    (tmp_path / "params.yaml").write_text(f"infer:\n  ef_search: {json.dumps(value)}\n")
    with pytest.raises(ConfigError, match=r"params.yaml:infer.ef_search: .*'infer.ef_search' must be"):
        load_params(tmp_path / "params.yaml").integer("infer.ef_search", 0)


@pytest.mark.parametrize("values", [[2.7], [10, "abc"], [], [True], [0], "10"])
def test_a_list_parameter_names_its_key_for_any_bad_entry(tmp_path, values):
    (tmp_path / "params.yaml").write_text(f"infer:\n  b_sweep: {json.dumps(values)}\n")
    with pytest.raises(ConfigError, match=r"params.yaml:infer.b_sweep: infer.b_sweep must be a non-empty list"):
        load_params(tmp_path / "params.yaml").grid("infer.b_sweep", lambda v: positive_int(v, "b"), "integers >= 1")


def test_good_values_pass_through(tmp_path):
    (tmp_path / "params.yaml").write_text("infer:\n  ef_search: 0\n  b_sweep: [10, 25]\n")
    params = load_params(tmp_path / "params.yaml")
    assert params.integer("infer.ef_search", 0) == 0
    assert params.grid("infer.b_sweep", lambda v: positive_int(v, "b"), "integers >= 1") == (10, 25)


def test_an_error_about_a_parameter_names_the_parameters_file_in_use():
    """Library code names the default params.yaml; a stage given --params names that file instead, and an
    error about any other file keeps its path."""
    about_params = ConfigError("M must be >= 2, got 1", PARAMS_FILE, "index.M")
    assert (about_params.in_params_file("runs/a.yaml").one_line()
            == "ConfigError: runs/a.yaml:index.M: M must be >= 2, got 1")
    assert about_params.in_params_file(PARAMS_FILE) is about_params
    about_data = DataError("cut short", "artifacts/x.npy")
    assert about_data.in_params_file("runs/a.yaml") is about_data
