"""params.yaml as typed, frozen settings, each value checked at load: a bad one is one ConfigError naming the file
and dotted key. Read as YAML 1.2, as `dvc exp run -S` writes it (`1e-4` a float); defaults live in params.yaml (here
only data.debian_mirror and infer.val_folds); `Settings.model_json_schema()` is params.schema.json."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, Strict, TypeAdapter, ValidationError

from .errors import PARAMS_FILE, ConfigError, DataError

AUTO = "auto"
Auto = Literal["auto"]
Precision = Literal["auto", "fp32", "bf16", "fp16"]
# int8 only encodes, on the CPU (encoder/int8.py): the embed stage and a packaged model take it, training does not
EmbedPrecision = Literal["auto", "fp32", "bf16", "fp16", "int8"]
DEVICE_PATTERN = r"auto|cpu|cuda(:\d+)?"
QUERY_THREADS = 1
"""CPU threads `raexmc predict` and each request of `raexmc serve` answer on by default: a short query's matrices
are too small to share, and on a shared 2-core CPU torch's two threads wait on each other (p50 30 to 750 ms against
18 to 22 ms on one: bench/results/predict_latency_foldoc.json); concurrent requests are scored together instead."""
Device = Annotated[str, Field(pattern=rf"^({DEVICE_PATTERN})$", description="auto | cpu | cuda | cuda:N")]
# The vocabularies of the settings; the modules that use them take their tuples from here (typing.get_args).
TextFields = Literal["title", "title+content"]
StorageDtype = Literal["float32", "float16"]
IndexBackend = Literal["hnsw", "exact", "milvus"]
KeepMethod = Literal["kmeans", "kmeans-labels", "random"]
Retrieval = Literal["joint", "split"]
Relevance = Literal["binary", "graded"]
ScheduleMode = Literal["fixed", "auto"]
HeadlineMetric = Literal["P@1", "P@3", "P@5", "nDCG@5", "PSP@5", "R@10", "R@100"]

# Integers and numbers of a range; True and False are neither (the models are strict), an int is a number.
AtLeast0 = Annotated[int, Field(ge=0)]
AtLeast1 = Annotated[int, Field(ge=1)]
Share = Annotated[float, Field(ge=0, le=1)]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False)]


def grid(item: Any) -> Any:  # a non-empty list, held as a tuple (so the settings stay frozen)
    return Annotated[tuple[item, ...], Strict(False), Field(min_length=1)]


SectionT = TypeVar("SectionT", bound="Section")


class Section(BaseModel):
    """A section of params.yaml: strict types, every key required, unknown keys refused, read-only."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, use_attribute_docstrings=True)


class DataSettings(Section):
    name: str
    """A dataset of the catalogue: the file datasets/<name>.yaml beside params.yaml."""
    xc_repo_url: str
    """Base URL of `xc-repo` archives (archive_id appended)."""
    debian_mirror: str = "https://deb.debian.org/debian"
    """Where the Debian packages come from on machines without apt-get."""


class EncoderSettings(Section):
    name: str
    """Any Hugging Face name or local folder."""
    mode: Literal["zero-shot", "fine-tuned"]
    """zero-shot (use it as it is) | fine-tuned (the train stage trains it)."""


class TokenizeSettings(Section):
    input_fields: TextFields
    label_fields: TextFields
    input_max_len: AtLeast1
    label_max_len: AtLeast1
    batch_size: AtLeast1
    """Texts per tokenizer call."""


class TrainSection(Section):
    """The `train` section as written: launch keys, and schedule keys that may say auto (training/settings.py
    resolves them into the recipe)."""

    nproc: Auto | AtLeast1
    torchrun_args: str
    device: Device
    precision: Precision
    schedule: ScheduleMode
    batch_size: Auto | AtLeast1
    grad_cache_chunk: Auto | AtLeast0
    lr: Auto | Positive
    max_steps: Auto | AtLeast1
    warmup_steps: Auto | AtLeast0
    weight_decay: NonNegative
    grad_clip: Annotated[float, Field(gt=0)]
    """> 0; .inf: no clipping."""
    tau: Positive
    hnm_steps: Auto | AtLeast1
    hnm_topk: AtLeast1
    num_hard_negatives: AtLeast0
    hard_negatives: bool
    instance_negatives: bool
    val_fraction: Annotated[float, Field(ge=0, lt=1)]
    val_b: AtLeast1
    val_max_queries: AtLeast0
    val_lambda: Share
    validate_last: bool
    checkpoint_every: AtLeast1
    embed_batch_size: Auto | AtLeast1
    seed: AtLeast0


class EmbedSettings(Section):
    nproc: Auto | AtLeast1
    torchrun_args: str
    device: Device
    precision: EmbedPrecision
    """auto | fp32 | bf16 | fp16 | int8 (CPU only)."""
    dtype: StorageDtype
    """How the .npy files store the vectors."""
    batch_size: Auto | AtLeast1
    threads: AtLeast0
    """CPU threads; 0 = all."""


class IndexSettings(Section):
    backend: Auto | IndexBackend
    M: Annotated[int, Field(ge=2)]
    ef_construction: AtLeast1
    threads: AtLeast0
    """0 = all CPUs."""
    uri: str = "milvus.db"
    """milvus: a name ending in .db (Milvus Lite, in the index folder) or a server's http(s)://host:port."""
    token_env: str = ""
    """milvus: the environment variable holding the server's token (never the token itself)."""
    milvus_index: Literal["HNSW", "FLAT", "IVF_FLAT"] = "HNSW"


class SearchSettings(Section):
    device: Device


class MemorySection(Section):
    keep: Auto | Share
    keep_grid: grid(Share)
    method: KeepMethod
    prior: bool
    seed: AtLeast0
    prototypes: Auto | NonNegative
    prototypes_grid: grid(NonNegative)
    compression: str
    """none | fp16 | sq8 | sq4, optionally -m<M> after (memory/compression.py)."""


class InferSettings(Section):
    lam: Auto | Share = Field(alias="lambda")
    b: AtLeast1
    retrieval: Auto | Retrieval
    label_share: Auto | Share
    label_share_grid: grid(Share)
    tau: Auto | Positive
    tau_grid: grid(Positive)
    auto_metric: HeadlineMetric
    val_fraction: Annotated[float, Field(gt=0, lt=1)]
    val_max_queries: AtLeast1
    val_seed: AtLeast0
    val_folds: Auto | AtLeast1 = 1
    ef_search: AtLeast1
    lambda_sweep: grid(Share)
    b_sweep: grid(AtLeast1)
    relevance: Relevance
    ova_knn: bool


class EvaluateSettings(Section):
    propensity: Auto | Annotated[tuple[Positive, ...], Strict(False), Field(min_length=2, max_length=2)]
    """PSP@k's [A, B], or auto: the pair of the dataset's name in the table of standard XMC sets."""
    threads: AtLeast0


class SignificanceSettings(Section):
    metrics: grid(str)
    compare_with: str | None
    """Another run's per_instance.npz path or MLflow run id, or null."""


class PackageSettings(Section):
    registers: bool = Field(alias="register")
    """Log an MLflow pyfunc model and register it."""
    model_name: str | None
    """Registered model name; null = raexmc-<dataset>."""
    alias: str


class Settings(Section):
    """The whole of params.yaml."""

    data: DataSettings
    encoder: EncoderSettings
    tokenize: TokenizeSettings
    train: TrainSection
    embed: EmbedSettings
    index: IndexSettings
    search: SearchSettings
    memory: MemorySection
    infer: InferSettings
    evaluate: EvaluateSettings
    significance: SignificanceSettings
    package: PackageSettings


def schema_text() -> str:
    """params.schema.json, from the types above."""
    return json.dumps(Settings.model_json_schema(by_alias=True), indent=2, ensure_ascii=False) + "\n"


def read_params_tree(path: str | os.PathLike = PARAMS_FILE) -> dict[str, Any]:
    return read_mapping(path, "params file")


def read_mapping(path: str | os.PathLike, what: str) -> dict[str, Any]:
    """The YAML 1.2 mapping in file `path` (`what` it is) as plain dicts and lists, or a ConfigError (and line)."""
    from ruamel.yaml import YAML  # not at import: the GPU machines that only embed lack it
    from ruamel.yaml.error import YAMLError

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{what} not found", path)
    try:
        data = YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8"))
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise ConfigError(f"invalid YAML ({getattr(exc, 'problem', exc)})", path,
                          None if mark is None else mark.line + 1) from None
    if not isinstance(data, dict):
        raise ConfigError("top level must be a mapping", path)
    return _plain(data)


def _plain(node: Any) -> Any:
    if isinstance(node, dict):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node


def load_settings(path: str | os.PathLike = PARAMS_FILE) -> Settings:
    return settings_from(read_params_tree(path), path)


# Sections that left params.yaml for files of their own: what each was, and where its entries go now.
MOVED_SECTIONS = {"datasets": ("dataset catalogue", "each entry to datasets/<name>.yaml"),
                  "presets": ("presets catalogue", "its entries to presets.yaml")}


def settings_from(tree: dict[str, Any], path: str | os.PathLike = PARAMS_FILE) -> Settings:
    for section, home in MOVED_SECTIONS.items():
        if section in tree:
            raise ConfigError(f"the {home[0]} is no longer a section of the params: move {home[1]} beside it, then "
                              "delete the section", path, section)
    try:
        settings = Settings.model_validate(tree)
    except ValidationError as exc:
        raise config_error(exc, path) from None
    folds = settings.infer.val_folds
    if settings.encoder.mode == "fine-tuned" and folds != AUTO and folds > 1:
        raise ConfigError(f"infer.val_folds {folds} with encoder.mode fine-tuned: the encoder was trained on every "
                          "input outside the first fold, so the others would validate on training inputs; use 1 or "
                          "auto", path, "infer.val_folds")
    return settings


def section_from(model: type[SectionT], section: str, values: dict[str, Any]) -> SectionT:
    """Section `section`'s settings from values a caller passes in code, or one ConfigError naming its key."""
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        raise config_error(exc, PARAMS_FILE, (section,)) from None


def record_value(kind: Any, value: Any, path: str | os.PathLike, key: str, fix: str = "") -> Any:
    """`value` at `key` of a file the pipeline wrote, checked against a settings type, or a DataError saying `fix`."""
    try:
        return TypeAdapter(kind).validate_python(value, strict=True)
    except ValidationError as exc:
        wanted = dict.fromkeys(_wanted(error) for error in exc.errors())
        raise DataError(f"must be {' or '.join(wanted)}, got {value!r}{fix and ': ' + fix}", path, key) from None


def record_error(exc: ValidationError, path: str | os.PathLike, fix: str = "") -> DataError:
    """The first error of validating a record the pipeline wrote as one DataError naming its key, saying `fix`."""
    error = exc.errors()[0]
    key = ".".join(str(part) for part in error["loc"])
    if error["type"] == "missing":
        return DataError(f"lacks {key}{fix and ': ' + fix}", path)
    if error["type"] == "extra_forbidden":
        return DataError(f"unknown key{fix and ': ' + fix}", path, key)
    what = (f"must be {_wanted(error)}, got {error['input']!r}" if error["type"] != "value_error"
            else error["msg"].removeprefix("Value error, "))
    return DataError(f"{what}{fix and ': ' + fix}", path, key or None)


def config_error(exc: ValidationError, path: str | os.PathLike = PARAMS_FILE,
                 within: tuple[str, ...] = ()) -> ConfigError:
    """The first error of validating Settings (or the section at `within`) as one ConfigError: the dotted key and
    every alternative of a union (`must be 'auto' or greater than or equal to 1`)."""
    errors = [{**error, "loc": (*within, *error["loc"])} for error in exc.errors()]
    key, entry, section = _key(errors[0]["loc"])
    if errors[0]["type"] == "missing":
        return ConfigError("missing parameter", path, key)
    if errors[0]["type"] == "extra_forbidden":
        return ConfigError(f"unknown parameter (known here: {', '.join(_fields(section))})", path, key)
    wanted = dict.fromkeys(_wanted(error) for error in errors if _key(error["loc"])[0] == key and not _echo(error))
    where = "" if entry is None else f"entry {entry} "
    return ConfigError(f"{where}must be {' or '.join(wanted)}, got {errors[0]['input']!r}", path, key)


def _echo(error: dict[str, Any]) -> bool:
    """A list's length error that only echoes a bad entry (the entries left after validation are too few)."""
    return error["type"] == "too_short" and error["ctx"].get("actual_length", 0) < len(error["input"])


# pydantic's words for what a value must be, where a user's are shorter
_WANTED = {"model_type": "a mapping of settings", "dict_type": "a mapping", "tuple_type": "a list",
           "list_type": "a list", "bool_type": "true or false", "int_type": "an integer",
           "float_type": "a number", "string_type": "a string", "finite_number": "a finite number",
           "string_pattern_mismatch": "auto, cpu, cuda or cuda:N"}   # Device is the one pattern


def _wanted(error: dict[str, Any]) -> str:
    if error["type"] in _WANTED:
        return _WANTED[error["type"]]
    if error["type"] == "too_short":
        least = error["ctx"]["min_length"]
        return "a non-empty list" if least == 1 else f"a list of at least {least} entries"
    if error["type"] == "too_long":
        return f"a list of at most {error['ctx']['max_length']} entries"
    return error["msg"].removeprefix("Input should be ")


def _key(loc: tuple) -> tuple[str, int | None, type[BaseModel]]:
    """(dotted params key, first list index or None, the section holding the key's last part) of an error's
    location; a union's branch tags are no keys."""
    model: Any = Settings
    parts, entry, section = [], None, Settings
    for part in loc:
        if model is None:
            if isinstance(part, int) and entry is None:
                entry = part
            continue
        parts.append(str(part))
        section = model
        field = _fields(model).get(part)
        annotation = None if field is None else field.annotation
        model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    return ".".join(parts), entry, section


def _fields(model: type[BaseModel]) -> dict[str, Any]:  # by the names params.yaml gives them
    return {field.alias or name: field for name, field in model.model_fields.items()}
