"""Raw texts (RaeModel.predict, `raexmc predict --file`, serve's shared batches) are encoded in length-sorted
batches of at most TEXT_TOKENS token positions, each padded only to its own longest text, and their vectors come back
in the order the texts came in."""

from __future__ import annotations

import numpy as np

from raexmc.encoder.text_encoder import TEXT_TOKENS, TextEncoder

BUDGET = TEXT_TOKENS["cpu"]


def words(count: int) -> str:
    """A text of `count` tokens plus [CLS] and [SEP]: 'unix' is one WordPiece token of the MiniLM vocabulary."""
    return " ".join(["unix"] * count)


def test_a_batch_is_padded_to_its_own_longest_text_and_vectors_come_back_in_the_order_of_the_texts(tiny_model):
    """200 texts of 9 tokens (+2) and 200 of 1 (+2), interleaved. Sorted by length, the long ones fill batches of
    BUDGET // 11 rows and the rest, and the short ones (at most half of 11) start their own: the model sees 200 x
    (11 + 3) token positions; one batch padded to the longest would be 400 x 11.

    Then texts of 1 to 11 words and a row number, lengths mixed, in batches of mixed widths: each text's vector is
    the one it gets alone (no padding at all), to float32 rounding; the row numbers make every text's vector its
    own, so a vector given to another row would show."""
    encoder = TextEncoder.load(tiny_model, "cpu", "fp32", max_len=16)
    shapes = []
    hook = encoder.model.register_forward_pre_hook(lambda module, args: shapes.append(tuple(args[0].shape)))
    try:
        vectors = encoder.embed_texts([words(9) if row % 2 else words(1) for row in range(400)])
    finally:
        hook.remove()
    full = BUDGET // 11
    assert vectors.shape == (400, encoder.dim)
    assert sorted(shapes) == sorted([(full, 11), (200 - full, 11), (200, 3)])
    assert sum(rows * width for rows, width in shapes) == 200 * (11 + 3)
    rng = np.random.default_rng(0)
    texts = [words(int(count)) + f" {row}" for row, count in enumerate(rng.integers(1, 12, 45))]
    together = encoder.embed_texts(texts)
    alone = np.concatenate([encoder.embed_texts([text]) for text in texts])
    np.testing.assert_allclose(together, alone, rtol=0, atol=1e-5)
    assert np.abs(alone[:, None] - alone[None]).max(axis=2)[~np.eye(len(texts), dtype=bool)].min() > 1e-3
