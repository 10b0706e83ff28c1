"""Raw texts (RaeModel.predict, `raexmc predict --file`, serve's shared batches) are encoded in length-sorted
batches of at most TEXT_TOKENS token positions, each padded only to its own longest text and cut where padding costs
more than a call (CALL_TOKENS), and their vectors come back in the order the texts came in."""

from __future__ import annotations

import numpy as np
import pytest

from raexmc.encoder.device import AUTO_EMBED_BATCH
from raexmc.encoder.text_encoder import CALL_TOKENS, TEXT_TOKENS, TextEncoder

BUDGET, CALL = TEXT_TOKENS["cpu"], CALL_TOKENS["cpu"]


def words(count: int) -> str:
    """A text of `count` tokens plus [CLS] and [SEP]: 'unix' is one WordPiece token of the MiniLM vocabulary."""
    return " ".join(["unix"] * count)


def embedded_with_call_shapes(encoder: TextEncoder, texts: list[str]) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """embed_texts' vectors and the (rows, width) of every encoder call it made, in call order."""
    shapes = []
    hook = encoder.model.register_forward_pre_hook(lambda module, args: shapes.append(tuple(args[0].shape)))
    try:
        return encoder.embed_texts(texts), shapes
    finally:
        hook.remove()


def test_a_batch_is_padded_to_its_own_longest_text_and_vectors_come_back_in_the_order_of_the_texts(tiny_model):
    """200 texts of 9 tokens (+2) and 200 of 1 (+2), interleaved. Sorted by length, the long ones fill batches of
    BUDGET // 11 rows and the rest, and the short ones start their own (padding 200 of them by 8 costs more than a
    call): the model sees 200 x (11 + 3) token positions; one batch padded to the longest would be 400 x 11.

    Then texts of 1 to 11 words and a row number, lengths mixed, in batches of mixed widths: each text's vector is
    the one it gets alone (no padding at all), to float32 rounding; the row numbers make every text's vector its
    own, so a vector given to another row would show."""
    encoder = TextEncoder.load(tiny_model, "cpu", "fp32", max_len=16)
    vectors, shapes = embedded_with_call_shapes(encoder, [words(9) if row % 2 else words(1) for row in range(400)])
    full = BUDGET // 11
    assert 200 * 8 > CALL and 200 * 3 <= BUDGET and 200 <= AUTO_EMBED_BATCH["cpu"]  # the cuts' premises
    assert vectors.shape == (400, encoder.dim)
    assert sorted(shapes) == sorted([(full, 11)] * (200 // full) + [(200 % full, 11), (200, 3)])
    assert sum(rows * width for rows, width in shapes) == 200 * (11 + 3)
    rng = np.random.default_rng(0)
    texts = [words(int(count)) + f" {row}" for row, count in enumerate(rng.integers(1, 12, 45))]
    together = encoder.embed_texts(texts)
    alone = np.concatenate([encoder.embed_texts([text]) for text in texts])
    np.testing.assert_allclose(together, alone, rtol=0, atol=1e-5)
    assert np.abs(alone[:, None] - alone[None]).max(axis=2)[~np.eye(len(texts), dtype=bool)].min() > 1e-3


@pytest.mark.parametrize(("counts", "expected"), [
    ({30: 31, 12: 1}, [(32, 32)]),             # padding one text by 18 costs less than a call: one call, as encode()
    ({30: 24, 12: 8}, [(24, 32), (8, 14)]),    # padding eight by 18 (144) costs more: a call of their own
    ({30: 16, 18: 16}, [(16, 32), (16, 20)]),  # 16 x 12 (192) more: cut, though no text is half the longest
])
def test_a_run_of_shorter_texts_gets_its_own_call_only_where_padding_it_costs_more_than_a_call(tiny_model, counts,
                                                                                           expected):
    """Texts of 30 and 12 or 18 words (+2 tokens), BUDGET // 32 of them: one call of 32 x 32 fits BUDGET, so each cut
    is the hand-computed trade of padded positions against CALL."""
    assert BUDGET == 32 * 32 and 18 < CALL < 144
    encoder = TextEncoder.load(tiny_model, "cpu", "fp32", max_len=40)
    texts = [words(count) for count, times in counts.items() for _ in range(times)]
    _, shapes = embedded_with_call_shapes(encoder, texts)
    assert shapes == expected
