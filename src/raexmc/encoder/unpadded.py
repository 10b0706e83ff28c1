"""BERT's forward on the real tokens alone, for gradient-free calls on a CPU: every linear layer and LayerNorm runs
on the packed token states (no padded rows), attention alone in the padded layout under the key mask. Its last
hidden states equal the padded forward's on every real token, so pooling gives the same vectors; the padded rows
it skips were up to 9% of predict's work on title-length requests (bench/results/cpu_encoder_speed_amd-epyc.json)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def unpads(transformer: nn.Module) -> bool:
    """Whether `transformer` is a BERT encoder (transformers' BertModel: no decoder, no cross-attention), whose
    layer structure this forward reproduces; any other model keeps its own forward."""
    from transformers import BertModel

    config = transformer.config
    return type(transformer) is BertModel and not config.is_decoder and not config.add_cross_attention


def _heads(packed: torch.Tensor, real: torch.Tensor, head_size: int) -> torch.Tensor:
    """(tokens, hidden) -> (rows, heads, width, head_size), zeros at the padded positions."""
    padded = packed.new_zeros(*real.shape, packed.shape[-1])
    padded[real] = packed
    return padded.view(*real.shape, -1, head_size).transpose(1, 2)


def last_hidden_unpadded(bert: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """BertModel(input_ids, attention_mask).last_hidden_state at the real tokens (zeros at the padded ones), in eval
    mode: the embeddings of the padded rows, then each layer's projections, output blocks and feed-forward on the
    real tokens, and scaled dot-product attention over each row's real keys."""
    real = attention_mask.bool()
    keys = real[:, None, None, :]
    hidden = bert.embeddings(input_ids=input_ids)[real]
    for layer in bert.encoder.layer:
        heads = layer.attention.self
        query, key, value = (_heads(project(hidden), real, heads.attention_head_size)
                             for project in (heads.query, heads.key, heads.value))
        context = F.scaled_dot_product_attention(query, key, value, attn_mask=keys, scale=heads.scaling)
        attended = layer.attention.output(context.transpose(1, 2).flatten(2)[real], hidden)
        hidden = layer.output(layer.intermediate(attended), attended)
    states = hidden.new_zeros(*real.shape, hidden.shape[-1])
    states[real] = hidden
    return states
