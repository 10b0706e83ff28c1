"""The encoder as one module: transformer, pooling, Dense layers, L2 normalisation, saved in the
sentence-transformers layout; everything calls it through text_encoder.TextEncoder."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from .layout import Dense, Pooling, read_modules, write_modules
from .model import load_checked, resolve_encoder
from .unpadded import last_hidden_unpadded, unpads

# Attention kernels without cuDNN's, which plans every new input shape anew (1.8 ms of CPU a layer call on an H200),
# and our shapes change at every step and embed batch: on that H200 MiniLM's training step went 7,058 -> 12,005
# inputs/s, embedding 32,181 -> 111,266 texts/s (bench/results/train_speed.json, embed_speed.json). CPUs: no change.
OTHER_ATTENTION = ((SDPBackend.FLASH_ATTENTION, torch.backends.cuda.flash_sdp_enabled),
                   (SDPBackend.EFFICIENT_ATTENTION, torch.backends.cuda.mem_efficient_sdp_enabled),
                   (SDPBackend.MATH, torch.backends.cuda.math_sdp_enabled))


def attention_without_cudnn() -> list[SDPBackend]:
    """The attention kernels torch's flags allow now, less cuDNN's (unless cuDNN is all they allow)."""
    allowed = [backend for backend, enabled in OTHER_ATTENTION if enabled()]
    if not allowed and torch.backends.cuda.cudnn_sdp_enabled():
        return [SDPBackend.CUDNN_ATTENTION]
    return allowed


class SentenceEncoder(nn.Module):
    """Unit vectors of right-padded token rows: the transformer's last hidden states, pooled, through the
    Dense layers, L2-normalised (always: RAE's scores compare unit vectors)."""

    def __init__(self, transformer: nn.Module, pooling: Pooling, dense: Sequence[Dense] = ()):
        super().__init__()
        self.transformer = transformer
        self.pooling = pooling
        self.dense = nn.ModuleList(dense)
        self.unpads = unpads(transformer)

    @property
    def dim(self) -> int:
        return self.dense[-1].linear.out_features if len(self.dense) else self.transformer.config.hidden_size

    @property
    def recipe(self) -> str:
        """How a text becomes its vector, in one line (the runs record it): 'mean pooling, normalised'."""
        layers = [f"Dense {layer.linear.in_features}->{layer.linear.out_features} {type(layer.activation).__name__}"
                  for layer in self.dense]
        return ", ".join([f"{self.pooling.mode} pooling", *layers, "normalised"])

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        with sdpa_kernel(attention_without_cudnn()):
            hidden = self.transformer(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self._vectors(hidden, attention_mask)

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """forward's vectors for calls without graph: a BERT on a CPU computes on its real tokens alone (where
        a call has padding: a text alone keeps transformers' forward). A GPU's padded calls are the ones measured."""
        if not self.unpads or input_ids.device.type != "cpu" or bool(attention_mask.all()):
            return self(input_ids, attention_mask)
        return self._vectors(last_hidden_unpadded(self.transformer, input_ids, attention_mask), attention_mask)

    def _vectors(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        vectors = self.pooling(hidden, attention_mask)
        for layer in self.dense:
            vectors = layer(vectors)
        return F.normalize(vectors.float(), dim=-1)

    def save(self, folder: str | os.PathLike) -> None:
        self.transformer.save_pretrained(folder)
        write_modules(folder, self.pooling, list(self.dense), self.transformer.config.hidden_size)


def load_encoder(name: str, device: str = "cpu", stage_output: bool = False) -> SentenceEncoder:
    """The encoder of `name` in eval mode on `device`, pooled as its sentence-transformers modules say."""
    from transformers import AutoModel

    transformer = load_checked(AutoModel.from_pretrained, name, "encoder", stage_output, reads_weights=True)
    modules = read_modules(resolve_encoder(name), transformer.config.hidden_size)
    if modules.source is None:
        _note_once(f"encoder '{name}' has no sentence-transformers modules.json: mean pooling, as the paper")
    elif not modules.normalize:
        _note_once(f"encoder '{name}' has no Normalize module: its vectors are L2-normalised all the same, as RAE "
                   f"compares unit vectors")
    return SentenceEncoder(transformer, modules.pooling, modules.dense).to(device).eval()


@functools.cache  # once per process, however often the same encoder is loaded
def _note_once(line: str) -> None:
    print(line, file=sys.stderr)
