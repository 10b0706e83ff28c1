"""`train.grad_cache_chunk: auto`: gradient caching only where a process's batch would not fit its graph budget.

The estimate, per layer and token 24 x hidden + 6 x heads x tokens floats (2 bytes under bf16/fp16), is above
what all-MiniLM-L6-v2 keeps (43.9 MB a 128-token text, 8.5 MB a 32-token one: bench/results/graph_memory.json);
at the LF-AmazonTitles-131K preset it says 28.5 GB where the step peaked at 24.3 GB on an H100 (docs/gpu.md).
A larger batch is encoded in chunks that fit (backward.cached_backward: the same step).
"""

from __future__ import annotations

from dataclasses import replace

from .settings import TrainSettings

CPU_BUDGET_BYTES = 4 * 2**30   # FOLDOC's default recipe (32 inputs of 128 tokens, 96 labels of 32): 2.7 GB
GPU_BUDGET_SHARE = 0.6         # of the device's memory; the rest holds the model, optimizer and embeddings


def graph_bytes_per_text(config, tokens: int, precision: str) -> int:
    """Bytes a text of `tokens` tokens keeps for the backward pass of a BERT-like encoder (its HF config)."""
    per_token = 24 * config.hidden_size + 6 * config.num_attention_heads * tokens
    return config.num_hidden_layers * tokens * per_token * (2 if precision in ("bf16", "fp16") else 4)


def graph_budget_bytes(device: str) -> int:
    """What a step's graph may hold on `device`."""
    if device.startswith("cuda"):
        import torch

        return int(GPU_BUDGET_SHARE * torch.cuda.get_device_properties(torch.device(device)).total_memory)
    return CPU_BUDGET_BYTES


def grad_cache_chunk(setting: int | str, config, precision: str, inputs: tuple[int, int], labels: tuple[int, int],
                     budget_bytes: int) -> int:
    """Texts per encoder pass for `setting` (a number as it is); auto: 0 (no caching) where this process's
    `inputs` and `labels` (texts, max tokens) fit `budget_bytes`, else as many of the longer texts as fit (>= 1)."""
    if setting != "auto":
        return int(setting)
    per_input, per_label = (graph_bytes_per_text(config, tokens, precision) for _, tokens in (inputs, labels))
    fits = inputs[0] * per_input + labels[0] * per_label <= budget_bytes
    return 0 if fits else max(1, budget_bytes // max(per_input, per_label))


def resolve_grad_cache(settings: TrainSettings, config, precision: str, token_key: dict, device: str) -> TrainSettings:
    """`settings` with grad_cache_chunk resolved for this process's batch at the token cache's lengths."""
    labels = settings.batch_size * (1 + settings.num_hard_negatives)
    chunk = grad_cache_chunk(settings.grad_cache_chunk, config, precision,
                             (settings.batch_size, token_key["input_max_len"]), (labels, token_key["label_max_len"]),
                             graph_budget_bytes(device))
    return replace(settings, grad_cache_chunk=chunk)
