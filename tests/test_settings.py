"""params.yaml as typed settings: YAML 1.2 numbers as `dvc exp run -S` writes them, one ConfigError line naming the
file and the key for any bad value, read-only settings, and the committed JSON Schema kept in step with the types."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from raexmc.errors import PARAMS_FILE, ConfigError, DataError
from raexmc.settings import (
    TokenizeSettings,
    load_settings,
    read_params_tree,
    schema_text,
    section_from,
    settings_from,
)
from tests.helpers import REPO

SCHEMA = REPO / "params.schema.json"


def with_value(key: str, value: object) -> dict:
    """The project's params tree with dotted `key` set to `value` (or removed, for ...)."""
    tree = read_params_tree(REPO / "params.yaml")
    *parents, leaf = key.split(".")
    node = tree
    for part in parents:
        node = node[part]
    if value is ...:
        del node[leaf]
    else:
        node[leaf] = value
    return tree


def error_of(key: str, value: object) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        settings_from(with_value(key, value), "runs/a.yaml")
    return info.value


def test_the_shipped_params_load_as_written_read_only_and_yaml_1_2_floats_and_integers_as_numbers(tmp_path):
    settings = load_settings(REPO / "params.yaml")
    assert (settings.infer.lam, settings.infer.tau, settings.infer.b, settings.infer.val_folds) == ("auto", "auto", 200,
                                                                                                  "auto")
    assert settings.memory.keep_grid == (1.0, 0.5, 0.25, 0.1) and settings.memory.prototypes == "auto"
    assert settings.train.lr == "auto" and settings.train.grad_clip == 1.0 and settings.train.hard_negatives is True
    assert settings.evaluate.propensity == "auto" and settings.package.registers is True
    assert settings.significance.metrics == ("P@1", "P@5", "R@100") and settings.significance.compare_with is None
    assert settings.data.name == "foldoc"
    assert settings_from(with_value("infer.val_folds", ...)).infer.val_folds == 1, "a default: may be left out"
    with pytest.raises(ValidationError, match="frozen"):  # read-only
        settings.infer.b = 10
    with pytest.raises(AttributeError):
        settings.memory.keep_grid.append(0.05)
    text = (REPO / "params.yaml").read_text().replace("  lr: auto", "  lr: 1e-4", 1)
    (tmp_path / "params.yaml").write_text(text)
    lr = load_settings(tmp_path / "params.yaml").train.lr
    assert isinstance(lr, float) and abs(lr - 1e-4) < 1e-15
    assert settings_from(with_value("train.grad_clip", 2)).train.grad_clip == 2.0  # a number written as an integer
    assert settings_from(with_value("train.grad_clip", float("inf"))).train.grad_clip == float("inf")


def test_a_typo_is_refused_with_its_key():
    error = error_of("infer.lamda", 0.3)
    assert (error.path, error.record) == ("runs/a.yaml", "infer.lamda")
    assert error.message.startswith("unknown parameter (known here: lambda, b, retrieval, ")


@pytest.mark.parametrize("section, name, field", [("infer", "lambda", "lam"), ("package", "register", "registers")])
def test_a_field_s_python_name_is_no_params_key(section, name, field):
    """`lambda` and `register` are fields `lam` and `registers` in code; params.yaml knows them by their own names."""
    tree = read_params_tree(REPO / "params.yaml")
    tree[section][field] = tree[section].pop(name)
    with pytest.raises(ConfigError) as info:
        settings_from(tree)
    assert (info.value.record, info.value.message) == (f"{section}.{name}", "missing parameter")


@pytest.mark.parametrize("key, value, line", [
    ("infer.b", ..., "infer.b: missing parameter"),
    ("tokenize.input_max_len", "ten", "tokenize.input_max_len: must be an integer, got 'ten'"),
    ("tokenize.label_max_len", True, "tokenize.label_max_len: must be an integer, got True"),
    ("tokenize.batch_size", 2.5, "tokenize.batch_size: must be an integer, got 2.5"),
    ("tokenize.label_max_len", 0, "tokenize.label_max_len: must be greater than or equal to 1, got 0"),
    ("tokenize.input_fields", "body", "tokenize.input_fields: must be 'title' or 'title+content', got 'body'"),
    ("tokenize.label_fields", None, "tokenize.label_fields: must be 'title' or 'title+content', got None"),
    ("infer.lambda", 2, "infer.lambda: must be 'auto' or less than or equal to 1, got 2"),
    ("embed.batch_size", 0, "embed.batch_size: must be 'auto' or greater than or equal to 1, got 0"),
    ("embed.dtype", "int8", "embed.dtype: must be 'float32' or 'float16', got 'int8'"),
    ("embed.device", "gpu0", "embed.device: must be auto, cpu, cuda or cuda:N, got 'gpu0'"),
    ("infer.b_sweep", [10, "abc"], "infer.b_sweep: entry 1 must be an integer, got 'abc'"),
    ("train.lr", float("nan"), "train.lr: must be 'auto' or a finite number, got nan"),
    ("memory.prior", "yes", "memory.prior: must be true or false, got 'yes'"),
    ("infer", 3, "infer: must be a mapping of settings, got 3"),
    ("significance.metrics", [], "significance.metrics: must be a non-empty list, got []"),
    ("evaluate.propensity", [0.55], "evaluate.propensity: must be 'auto' or a list of at least 2 entries, got [0.55]"),
    ("infer.lambda", "abc", "infer.lambda: must be 'auto' or a number, got 'abc'"),
    ("infer.tau", 0, "infer.tau: must be 'auto' or greater than 0, got 0"),
    ("infer.tau_grid", [0.04, -1], "infer.tau_grid: entry 1 must be greater than 0, got -1"),
    ("infer.auto_metric", "P@2",
     "infer.auto_metric: must be 'P@1', 'P@3', 'P@5', 'nDCG@5', 'PSP@5', 'R@10' or 'R@100', got 'P@2'"),
    ("infer.val_fraction", 1.0, "infer.val_fraction: must be less than 1, got 1.0"),
    ("infer.val_max_queries", 0, "infer.val_max_queries: must be greater than or equal to 1, got 0"),
    ("infer.val_max_queries", 2.5, "infer.val_max_queries: must be an integer, got 2.5"),
    ("infer.retrieval", "both", "infer.retrieval: must be 'auto' or 'joint' or 'split', got 'both'"),
    ("infer.label_share", True, "infer.label_share: must be 'auto' or a number, got True"),
    ("infer.label_share_grid", [0.5, 2], "infer.label_share_grid: entry 1 must be less than or equal to 1, got 2"),
    ("memory.keep_grid", [0.5, 2], "memory.keep_grid: entry 1 must be less than or equal to 1, got 2"),
])
def test_a_bad_value_is_one_line_naming_the_file_and_key(key, value, line):
    assert error_of(key, value).one_line() == f"ConfigError: runs/a.yaml:{line}"


UNIONS_WITH_AUTO = ("evaluate.propensity", "infer.val_folds")


@pytest.mark.parametrize("key, value", [
    *(("infer.ef_search", value) for value in (-1, 2.5, "3", True)),
    *(("infer.b_sweep", value) for value in ([2.7], [10, "abc"], [], [True], [0], "10")),
    *(("memory.prototypes_grid", value) for value in ([0.5, -1], [], "0.5", [True], [float("nan")])),
    *(("evaluate.propensity", value) for value in (["a", 1.5], [-1, -2], [0, 1.5], [0.55, 0], [0.6, float("inf")],
                                                    "0.6, 2.6")),
    *(("infer.val_folds", value) for value in (0, 1.5, "some"))])
def test_a_bad_value_of_any_kind_is_one_line_naming_its_key(key, value):
    error = error_of(key, value)
    assert error.record == key and "must be " in error.message and "\n" not in error.one_line()
    assert ("must be 'auto' or " in error.message) == (key in UNIONS_WITH_AUTO)


def test_more_than_one_fold_with_a_fine_tuned_encoder_is_refused_as_the_params_load():
    """Training held out only the first fold: another would validate on inputs the encoder was trained on."""
    tree = with_value("infer.val_folds", 2)
    tree["encoder"]["mode"] = "fine-tuned"
    with pytest.raises(ConfigError) as info:
        settings_from(tree, "runs/a.yaml")
    assert info.value.one_line() == (
        "ConfigError: runs/a.yaml:infer.val_folds: infer.val_folds 2 with encoder.mode fine-tuned: the encoder was "
        "trained on every input outside the first fold, so the others would validate on training inputs; use 1 or auto")
    tree["infer"]["val_folds"] = "auto"
    assert settings_from(tree).infer.val_folds == "auto"


def test_invalid_yaml_names_the_line_and_a_section_built_in_code_its_key(tmp_path):
    (tmp_path / "params.yaml").write_text("a: 1\nb: [unclosed\n")
    with pytest.raises(ConfigError, match=r"params.yaml:\d+: invalid YAML"):
        load_settings(tmp_path / "params.yaml")
    # a section built in code names its params key
    values = {"input_max_len": 0, "label_max_len": 8, "input_fields": "title", "label_fields": "title",
              "batch_size": 4}
    with pytest.raises(ConfigError) as info:
        section_from(TokenizeSettings, "tokenize", values)
    assert (info.value.path, info.value.record) == (PARAMS_FILE, "tokenize.input_max_len")


@pytest.mark.parametrize(("section", "says"), [
    ("datasets", "the dataset catalogue is no longer a section of the params: move each entry to "
                 "datasets/<name>.yaml beside it, then delete the section"),
    ("presets", "the presets catalogue is no longer a section of the params: move its entries to presets.yaml "
                "beside it, then delete the section"),
])
def test_a_catalogue_left_in_the_params_says_where_its_entries_go(section, says):
    with pytest.raises(ConfigError) as info:
        settings_from({**read_params_tree(REPO / "params.yaml"), section: {"foldoc": {}}}, "runs/a.yaml")
    assert info.value.one_line() == f"ConfigError: runs/a.yaml:{section}: {says}"


# (dotted key, value, whether a params.yaml holding it is valid), each edge typed in from the key's meaning
SCHEMA_CASES = [("infer.lambda", 0.5, True), ("infer.lambda", "auto", True), ("infer.lambda", 1.5, False),
                ("infer.lambda", "half", False), ("infer.tau", 0.04, True), ("infer.tau", 0, False),
                ("infer.b", 200, True), ("infer.b", 0, False), ("infer.b", 2.5, False),
                ("infer.val_fraction", 0.1, True), ("infer.val_fraction", 1, False), ("index.M", 16, True),
                ("index.M", 1, False), ("index.backend", "exact", True), ("index.backend", "faiss", False),
                ("embed.batch_size", "auto", True), ("embed.batch_size", -1, False), ("embed.precision", "int8", True),
                ("embed.precision", "int4", False), ("train.precision", "int8", False), ("embed.threads", 0, True),
                ("embed.threads", -2, False), ("memory.keep", 0.5, True), ("memory.keep", 2, False),
                ("memory.keep", -0.1, False), ("memory.keep", "half", False), ("memory.method", "prototypes", False),
                ("infer.retrieval", "both", False), ("infer.label_share", 1.5, False),
                ("infer.label_share", True, False), ("infer.relevance", "weighted", False),
                ("index.ef_construction", 0, False), ("index.threads", -1, False), ("infer.lamda", 0.3, False)]
# The keywords `schema_accepts` reads; a schema using another would be a constraint it cannot see.
READ_KEYWORDS = {"anyOf", "const", "enum", "type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}
NOTES = {"title", "description", "default"}


def schema_accepts(schema: dict, value: object) -> bool:
    """Whether `value` meets `schema`, a JSON Schema of the few keywords the settings' leaves use (READ_KEYWORDS),
    read as the JSON Schema specification defines them (a JSON boolean is neither integer nor number)."""
    assert set(schema) <= READ_KEYWORDS | NOTES, sorted(set(schema) - READ_KEYWORDS - NOTES)
    if "anyOf" in schema:
        return any(schema_accepts(option, value) for option in schema["anyOf"])
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    kinds = {"string": isinstance(value, str), "number": number,
             "integer": number and float(value).is_integer()}
    return (kinds[schema.get("type", "string" if isinstance(value, str) else "number")]
            and schema.get("const", value) == value and value in schema.get("enum", [value])
            and (not number or (schema.get("minimum", value) <= value <= schema.get("maximum", value)
                                and schema.get("exclusiveMinimum", value - 1) < value
                                and value < schema.get("exclusiveMaximum", value + 1))))


def leaf_accepts(schema: dict, key: str, value: object) -> bool:
    """Whether params.yaml's schema `schema` takes `value` at dotted `key` (a section's unknown key: whether the
    section allows other keys)."""
    section, leaf = key.split(".")
    node = schema["$defs"][schema["properties"][section]["$ref"].removeprefix("#/$defs/")]
    if leaf not in node["properties"]:
        return node.get("additionalProperties", True) is not False
    return schema_accepts(node["properties"][leaf], value)


@pytest.mark.parametrize(("key", "value", "valid"), SCHEMA_CASES)
def test_the_committed_schema_accepts_and_refuses_what_the_loader_does(key, value, valid):
    """The settings loader, params.schema.json and the schema `raexmc schema` writes from the types now (rerun it
    after changing them) agree on each value, and all three with the key's meaning."""
    try:
        settings_from(with_value(key, value), PARAMS_FILE)
        loaded = True
    except ConfigError:
        loaded = False
    schemas = {"committed": json.loads(SCHEMA.read_text()), "generated": json.loads(schema_text())}
    assert {"loader": loaded, **{name: leaf_accepts(schema, key, value) for name, schema in schemas.items()}} == {
        "loader": valid, "committed": valid, "generated": valid}


def test_the_schema_knows_the_keys_and_their_ranges():
    schema = json.loads(SCHEMA.read_text())
    infer = schema["$defs"]["InferSettings"]
    assert infer["additionalProperties"] is False and "lambda" in infer["required"]
    assert {"const": "auto", "type": "string"} in infer["properties"]["lambda"]["anyOf"]
    assert {"maximum": 1, "minimum": 0, "type": "number"} in infer["properties"]["lambda"]["anyOf"]


def test_an_error_about_a_parameter_names_the_parameters_file_in_use():
    """Library code names the default params.yaml; a stage given --params names that file instead, and an
    error about any other file keeps its path."""
    about_params = ConfigError("M must be >= 2, got 1", PARAMS_FILE, "index.M")
    assert (about_params.in_params_file("runs/a.yaml").one_line()
            == "ConfigError: runs/a.yaml:index.M: M must be >= 2, got 1")
    assert about_params.in_params_file(PARAMS_FILE) is about_params
    about_data = DataError("cut short", "artifacts/x.npy")
    assert about_data.in_params_file("runs/a.yaml") is about_data
