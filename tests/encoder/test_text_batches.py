"""Raw texts (RaeModel.predict, `raexmc predict --file`, serve's shared batches) are encoded in length-sorted
batches, each padded only to its own longest text, and their vectors come back in the order the texts came in."""

from __future__ import annotations

import numpy as np

from raexmc.encoder.text_encoder import TEXT_BATCH, TextEncoder

BATCH = TEXT_BATCH["cpu"]


def words(count: int) -> str:
    """A text of `count` tokens plus [CLS] and [SEP]: 'unix' is one WordPiece token of the MiniLM vocabulary."""
    return " ".join(["unix"] * count)


def test_a_batch_is_padded_to_its_own_longest_text(tiny_model):
    """BATCH texts of 9 tokens (+2) and BATCH of 1 (+2), interleaved: sorted by length they make one
    batch of each, so the model sees BATCH x (11 + 3) token positions; one batch padded to the longest
    would be 2 x BATCH x 11."""
    encoder = TextEncoder.load(tiny_model, "cpu", "fp32", max_len=16)
    shapes = []
    hook = encoder.model.register_forward_pre_hook(lambda module, args: shapes.append(tuple(args[0].shape)))
    try:
        vectors = encoder.embed_texts([words(9) if row % 2 else words(1) for row in range(2 * BATCH)])
    finally:
        hook.remove()
    assert vectors.shape == (2 * BATCH, encoder.dim)
    assert sorted(shapes) == [(BATCH, 3), (BATCH, 11)]
    assert sum(rows * width for rows, width in shapes) == BATCH * (11 + 3)


def test_vectors_come_back_in_the_order_of_the_texts(tiny_model):
    """Texts of 1 to 11 words and a row number, lengths mixed, over two full batches and a part: each text's vector is
    the one it gets alone (no padding at all), to float32 rounding; the row numbers make every text's vector its
    own, so a vector given to another row would show."""
    encoder = TextEncoder.load(tiny_model, "cpu", "fp32", max_len=16)
    rng = np.random.default_rng(0)
    texts = [words(int(count)) + f" {row}" for row, count in enumerate(rng.integers(1, 12, 2 * BATCH + 5))]
    together = encoder.embed_texts(texts)
    alone = np.concatenate([encoder.embed_texts([text]) for text in texts])
    np.testing.assert_allclose(together, alone, rtol=0, atol=1e-5)
    assert np.abs(alone[:, None] - alone[None]).max(axis=2)[~np.eye(len(texts), dtype=bool)].min() > 1e-3
