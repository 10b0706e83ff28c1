"""Pooling, then optional Dense layers, between the transformer's token states and a text's vector, as
sentence-transformers defines its Pooling and Dense modules; rows are right-padded (a row's tokens are its first
`mask.sum()`).
"""

from __future__ import annotations

import torch
from torch import nn

# sentence-transformers' pooling modes, each one text vector from the token states under the mask
POOLING_MODES = ("mean", "cls", "max", "lasttoken", "mean_sqrt_len_tokens", "weightedmean")


class Pooling(nn.Module):
    """One pooling mode over right-padded rows; no weights."""

    def __init__(self, mode: str):
        super().__init__()
        if mode not in POOLING_MODES:
            raise ValueError(f"pooling mode '{mode}' is not one of {', '.join(POOLING_MODES)}")
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
