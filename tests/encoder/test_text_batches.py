"""Raw texts (RaeModel.predict, `raexmc predict --file`, serve's shared batches) are encoded in length-sorted runs
of at most TEXT_TOKENS real tokens, each padded only to its own longest text; a BERT on a CPU runs its linear
layers on the real tokens alone; and the vectors come back in the order the texts came in, equal to transformers'
own padded forward to float32 rounding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from raexmc.encoder.device import AUTO_EMBED_BATCH
from raexmc.encoder.text_encoder import TEXT_TOKENS, TextEncoder, batch_tensors

BUDGET, ROWS = TEXT_TOKENS["cpu"], AUTO_EMBED_BATCH["cpu"]


def words(count: int) -> str:
    """A text of `count` tokens plus [CLS] and [SEP]: 'unix' is one WordPiece token of the MiniLM vocabulary."""
    return " ".join(["unix"] * count)


def embedded_with_calls(encoder: TextEncoder, texts: list[str]) -> tuple[np.ndarray, list[tuple[int, int]], list[int]]:
    """embed_texts' vectors, the (rows, width) of every encoder call it made, in call order, and the rows its first
    linear layer saw in each call (token states)."""
    bert, shapes, linear_rows = encoder.model.transformer, [], []
    hooks = [bert.embeddings.register_forward_pre_hook(
                 lambda module, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True),
             bert.encoder.layer[0].attention.self.query.register_forward_pre_hook(
                 lambda module, args: linear_rows.append(args[0].reshape(-1, args[0].shape[-1]).shape[0]))]
    try:
        return encoder.embed_texts(texts), shapes, linear_rows
    finally:
        for hook in hooks:
            hook.remove()


def test_a_call_is_padded_to_its_own_longest_text_and_its_linear_layers_see_the_real_tokens_alone(tiny_model):
    """200 texts of 9 tokens (+2) and 200 of 1 (+2), interleaved. Sorted by length, 93 long ones fill a call of
    1,023 tokens twice; the last 14 (154 tokens) and all 200 short ones (600) make a third of 754 tokens and 214
    rows, padded to 11 in attention only: the linear layers see the 2,800 real tokens, where one call padded to
    the longest would give them 400 x 11.

    Then texts of 1 to 11 words and a row number, lengths mixed: each text's vector is the one it gets alone (no
    padding at all) and the one transformers' padded forward gives it, to float32 rounding; the row numbers make
    every text's vector its own, so a vector given to another row would show."""
    assert (BUDGET, ROWS) == (1024, 256)  # the hand-computed calls' premises
    encoder = TextEncoder.load(tiny_model, "cpu", "fp32", max_len=16)
    vectors, shapes, linear_rows = embedded_with_calls(encoder, [words(9) if row % 2 else words(1)
                                                                for row in range(400)])
    assert vectors.shape == (400, encoder.dim)
    assert shapes == [(93, 11), (93, 11), (214, 11)]
    assert linear_rows == [1023, 1023, 754]
    rng = np.random.default_rng(0)
    texts = [words(int(count)) + f" {row}" for row, count in enumerate(rng.integers(1, 12, 45))]
    together = encoder.embed_texts(texts)
    alone = np.concatenate([encoder.embed_texts([text]) for text in texts])
    with torch.inference_mode():
        padded = encoder.model(*batch_tensors(*encoder.tokenize(texts), np.arange(len(texts)), "cpu")).numpy()
    np.testing.assert_allclose(together, alone, rtol=0, atol=1e-5)
    np.testing.assert_allclose(together, padded, rtol=0, atol=1e-5)
    assert np.abs(alone[:, None] - alone[None]).max(axis=2)[~np.eye(len(texts), dtype=bool)].min() > 1e-3


@pytest.mark.parametrize(("counts", "expected"), [
    ({30: 33}, [(32, 32), (1, 32)]),            # 32 texts of 32 tokens fill BUDGET: the 33rd starts a call
    ({30: 31, 12: 3}, [(33, 32), (1, 14)]),     # 31 x 32 + 2 x 14 = 1,020 fits, a third 14 would not
    ({1: 300}, [(ROWS, 3), (300 - ROWS, 3)]),   # 300 x 3 tokens fit BUDGET, but a call holds ROWS texts at most
])
def test_a_call_ends_where_the_next_text_would_pass_the_token_budget_or_the_rows_cap(tiny_model, counts, expected):
    encoder = TextEncoder.load(tiny_model, "cpu", "fp32", max_len=40)
    texts = [words(count) for count, times in counts.items() for _ in range(times)]
    _, shapes, _ = embedded_with_calls(encoder, texts)
    assert shapes == expected
