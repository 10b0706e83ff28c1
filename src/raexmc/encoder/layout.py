"""The sentence-transformers modules after the transformer (Pooling, Dense layers; on right-padded rows) and their
folder layout: `modules.json` lists them (Transformer, Pooling, Dense..., Normalize), each with its folder. Read, it
gives the vectors a model's authors meant; written, a fine-tuned encoder carries its recipe. Without it: mean
pooling, as the paper. What this project cannot reproduce is refused in one line."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from ..errors import ConfigError, first_line
from ..io import read_json, write_json

# sentence-transformers' pooling modes, each one text vector from the token states under the mask
POOLING_MODES = ("mean", "cls", "max", "lasttoken", "mean_sqrt_len_tokens", "weightedmean")


class Pooling(nn.Module):
    def __init__(self, mode: str):
        super().__init__()
        self.mode = mode

    def forward(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if self.mode == "cls":
            return hidden[:, 0]
        if self.mode == "lasttoken":  # the last real token of each row, never a pad
            last = (attention_mask.sum(dim=1) - 1).clamp(min=0)
            return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        if self.mode == "max":
            return hidden.masked_fill(mask == 0, float("-inf")).max(dim=1).values
        if self.mode == "weightedmean":  # weights 1, 2, ... by position, in float32 (bf16 counts exactly only to 256)
            positions = torch.arange(1, hidden.shape[1] + 1, device=hidden.device, dtype=torch.float32)
            mask = mask.float() * positions[:, None]
        total = (hidden * mask).sum(dim=1)
        count = mask.sum(dim=1).clamp(min=1.0)
        return total / (count.sqrt() if self.mode == "mean_sqrt_len_tokens" else count)


class Dense(nn.Module):
    """activation(linear(x)): sentence-transformers' Dense module, with its weight names (linear.weight, .bias)."""

    def __init__(self, in_features: int, out_features: int, bias: bool, activation: nn.Module):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=bias)
        self.activation = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.linear(x))


MODULES_FILE = "modules.json"
SENTENCE_CONFIG_FILE = "sentence_bert_config.json"  # the Transformer module's max length and lowercasing
PACKAGE = "sentence_transformers."
# The pooling config's mode flags (the layout every sentence-transformers version reads) and their modes.
MODE_FLAGS = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
              "pooling_mode_lasttoken": "lasttoken", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
              "pooling_mode_weightedmean_tokens": "weightedmean"}
DENSE_KEYS = {"in_features", "out_features", "bias", "activation_function", "module_input_name", "module_output_name",
              "use_residual"}
SENTENCE_VECTOR = "sentence_embedding"  # the feature a Dense layer must read and write to sit after pooling


@dataclass
class Modules:
    """What follows the transformer; `source`, the modules.json it came from (None: a plain model)."""

    pooling: Pooling
    dense: list[Dense] = field(default_factory=list)
    normalize: bool = False
    source: Path | None = None


def _file(model: str, relative: str) -> Path | None:
    """The file `relative` of model `model` (a folder or a hub name), None when it has none."""
    from transformers.utils import cached_file

    found = cached_file(model, relative, _raise_exceptions_for_missing_entries=False)
    return None if found is None else Path(found)


def module_kind(entry: dict, path: Path, index: int) -> str:
    """The class name (Pooling, ...) of a modules.json entry as any sentence-transformers version spells it."""
    kind = entry.get("type") if isinstance(entry, dict) else None
    if not isinstance(kind, str) or not kind.startswith(PACKAGE):
        raise ConfigError(f"module type {kind!r} is not a sentence-transformers module, which rae-xmc cannot "
                          f"reproduce", path, f"module {index}")
    return kind.rsplit(".", 1)[1]


def read_modules(model: str, hidden_size: int) -> Modules:
    """The modules after the transformer of `model` as its modules.json configures them (none: mean pooling)."""
    path = _file(model, MODULES_FILE)
    if path is None:
        return Modules(Pooling("mean"))
    entries = read_json(path)
    if not isinstance(entries, list) or not entries:
        raise ConfigError("modules.json must list the model's modules", path)
    pooling, dense, normalize, dim = None, [], False, hidden_size
    for index, entry in enumerate(entries):
        kind = module_kind(entry, path, index)
        folder = str(entry.get("path", "")).strip("/")
        if index == 0:
            if kind != "Transformer" or folder:
                raise ConfigError(f"the first module must be a Transformer in the model's own folder, got {kind} in "
                                  f"'{folder}'", path, "module 0")
            _check_transformer(model)
        elif kind == "Pooling" and pooling is None:
            pooling = Pooling(_pooling_mode(model, folder))
        elif kind == "Dense" and pooling is not None and not normalize:
            dense.append(_dense(model, folder, dim))
            dim = dense[-1].linear.out_features
        elif kind == "Normalize" and pooling is not None and not normalize:
            normalize = True
        else:
            raise ConfigError(f"module {kind} at this place cannot be reproduced by rae-xmc, which takes a "
                              f"Transformer, one Pooling, Dense layers and a Normalize", path, f"module {index}")
    if pooling is None:
        raise ConfigError("no Pooling module: rae-xmc needs one vector per text", path)
    return Modules(pooling, dense, normalize, path)


def _check_transformer(model: str) -> None:
    """Refuse what changes a Transformer's input before its tokenizer: lowercasing, a default prompt."""
    settings = _file(model, SENTENCE_CONFIG_FILE)
    if settings is not None and read_json(settings).get("do_lower_case", False):
        raise ConfigError("do_lower_case is true: rae-xmc tokenises texts as they are", settings, "do_lower_case")
    prompts = _file(model, "config_sentence_transformers.json")
    prompt = None if prompts is None else read_json(prompts).get("default_prompt_name")
    if prompt is not None:
        raise ConfigError(f"default_prompt_name is {prompt!r}: rae-xmc adds no prompt to texts", prompts,
                          "default_prompt_name")


def _config(model: str, folder: str, kind: str) -> tuple[Path, dict]:
    path = _file(model, f"{folder}/config.json")
    if path is None:
        raise ConfigError(f"the {kind} module has no config.json", Path(str(model)) / folder)
    return path, read_json(path)


def _pooling_mode(model: str, folder: str) -> str:
    """The one pooling mode of a Pooling module's config.json (the old flags or the newer `pooling_mode`)."""
    path, config = _config(model, folder, "Pooling")
    modes = config.get("pooling_mode") or [mode for flag, mode in MODE_FLAGS.items() if config.get(flag)] or ["mean"]
    modes = [modes] if isinstance(modes, str) else list(modes)
    if len(modes) != 1 or modes[0] not in POOLING_MODES:
        raise ConfigError(f"pooling mode {' + '.join(map(str, modes))} cannot be reproduced: rae-xmc takes one of "
                          f"{', '.join(POOLING_MODES)}", path, "pooling_mode")
    return modes[0]


def _activation(name: object, path: Path) -> nn.Module:
    cls = getattr(nn, name.rsplit(".", 1)[1], None) if isinstance(name, str) and name.startswith("torch.nn.") else None
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise ConfigError(f"activation {name!r} is not a torch.nn module", path, "activation_function")
    return cls()


def _dense(model: str, folder: str, in_features: int) -> Dense:
    """A Dense module from its folder (config.json and weights), taking `in_features` (what precedes it)."""
    path, config = _config(model, folder, "Dense")
    unknown = sorted(set(config) - DENSE_KEYS)
    if unknown:
        raise ConfigError(f"Dense setting '{unknown[0]}' is not one rae-xmc reproduces", path, unknown[0])
    for key in ("module_input_name", "module_output_name"):
        if config.get(key, SENTENCE_VECTOR) != SENTENCE_VECTOR:
            raise ConfigError(f"a Dense layer on '{config[key]}' cannot be reproduced: rae-xmc's act on the "
                              f"sentence vector", path, key)
    if config.get("use_residual", False):
        raise ConfigError("a Dense layer with use_residual cannot be reproduced by rae-xmc", path, "use_residual")
    if config.get("in_features") != in_features or not isinstance(config.get("out_features"), int):
        raise ConfigError(f"a Dense layer after a {in_features}-wide vector needs in_features {in_features} and an "
                          f"integer out_features", path, "in_features")
    layer = Dense(in_features, config["out_features"], bool(config.get("bias", True)),
                  _activation(config.get("activation_function", "torch.nn.modules.activation.Tanh"), path))
    try:
        layer.linear.load_state_dict(_dense_weights(model, folder))
    except RuntimeError as exc:  # missing, unexpected or misshapen tensors
        raise ConfigError(f"the Dense weights do not fit its config.json: {first_line(exc)}",
                          Path(str(model)) / folder) from None
    return layer


def _dense_weights(model: str, folder: str) -> dict[str, torch.Tensor]:
    safetensors = _file(model, f"{folder}/model.safetensors")
    if safetensors is not None:
        from safetensors.torch import load_file

        state = load_file(safetensors)
    else:
        pickled = _file(model, f"{folder}/pytorch_model.bin")
        if pickled is None:
            raise ConfigError("the Dense module has no weights (model.safetensors or pytorch_model.bin)",
                              Path(str(model)) / folder)
        state = torch.load(pickled, map_location="cpu", weights_only=True)
    return {name.removeprefix("linear."): tensor for name, tensor in state.items()}


def write_modules(folder: str | os.PathLike, pooling: Pooling, dense: list[Dense], hidden_size: int) -> None:
    """modules.json and the module folders of a Transformer saved at `folder`: `pooling`, `dense`, a Normalize."""
    from safetensors.torch import save_file

    folder = Path(folder)
    entries = [("Transformer", ""), ("Pooling", "1_Pooling")]
    flags = {flag: mode == pooling.mode for flag, mode in MODE_FLAGS.items()}
    write_json(folder / "1_Pooling" / "config.json", {"word_embedding_dimension": hidden_size, **flags})
    for layer in dense:
        name = f"{len(entries)}_Dense"
        activation = type(layer.activation)
        write_json(folder / name / "config.json",
                   {"in_features": layer.linear.in_features, "out_features": layer.linear.out_features,
                    "bias": layer.linear.bias is not None,
                    "activation_function": f"{activation.__module__}.{activation.__qualname__}"})
        weights = {f"linear.{key}": value.detach().cpu().contiguous()
                   for key, value in layer.linear.state_dict().items()}
        save_file(weights, str(folder / name / "model.safetensors"))
        entries.append(("Dense", name))
    entries.append(("Normalize", f"{len(entries)}_Normalize"))  # it has no files, so no folder
    write_json(folder / MODULES_FILE, [{"idx": idx, "name": str(idx), "path": path,
                                        "type": f"sentence_transformers.models.{kind}"}
                                       for idx, (kind, path) in enumerate(entries)])


def write_sentence_config(folder: str | os.PathLike, max_seq_length: int) -> None:
    """sentence_bert_config.json: rae-xmc's max length, so sentence-transformers cuts a long text where it does."""
    write_json(Path(folder) / SENTENCE_CONFIG_FILE, {"max_seq_length": max_seq_length, "do_lower_case": False})
