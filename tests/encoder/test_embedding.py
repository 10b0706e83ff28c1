"""The one encode function and the length-sorted embedding of a token cache."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from raexmc.data.dataset import Dataset
from raexmc.data.sources import build_dataset
from raexmc.encoder.embedding import embed_split, encode, length_sorted_batches
from raexmc.encoder.model import load_encoder, load_tokenizer
from raexmc.encoder.tokens import TokenCache, build_token_cache


def test_encode_is_a_normalised_masked_mean(tiny_model):
    model = load_encoder(str(tiny_model))
    ids = torch.tensor([[101, 2000, 2001, 102, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 0, 0]])
    with torch.inference_mode():
        hidden = model(input_ids=ids[:, :4], attention_mask=mask[:, :4]).last_hidden_state
        expected = torch.nn.functional.normalize(hidden.mean(dim=1), dim=-1)
        got = encode(model, ids, mask)
    assert torch.allclose(got, expected, atol=1e-5)
    assert torch.allclose(got.norm(dim=-1), torch.ones(1))


def test_batches_are_length_sorted_and_cover_every_row():
    lengths = np.array([3, 9, 1, 9, 4])
    batches = length_sorted_batches(lengths, 2)
    assert [b.tolist() for b in batches] == [[1, 3], [4, 0], [2]]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_embed_split_matches_one_text_at_a_time(lf_folder, tiny_model, tmp_path, precision):
    build_dataset("tiny", {"source": "local", "path": str(lf_folder)}, tmp_path / "tiny", "")
    build_token_cache(Dataset(tmp_path / "tiny"), load_tokenizer(str(tiny_model)), "tiny", tmp_path / "tokens",
                      16, 8, "title+content", "title")
    cache, model = TokenCache(tmp_path / "tokens"), load_encoder(str(tiny_model))
    report = embed_split(model, cache, "train", tmp_path / "train.npy", batch_size=3, device="cpu", precision=precision)
    assert report["texts"] == 4 and report["texts_per_s"] > 0
    got = np.load(tmp_path / "train.npy")
    ids, lengths = cache.ids("train"), cache.lengths("train")
    for row in range(4):
        n = int(lengths[row])
        with torch.inference_mode():
            one = encode(model, torch.tensor(ids[row:row + 1, :n].astype(np.int64)), torch.ones(1, n, dtype=torch.long))
        tolerance = 1e-5 if precision == "fp32" else 3e-2
        np.testing.assert_allclose(got[row], one[0].numpy(), atol=tolerance)
