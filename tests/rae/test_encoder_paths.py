"""One encoder object for every path: the embed stage's loop, a mining round, a training step's encoding and the
saved RaeModel give one text the same vector, the one sentence-transformers gives for the model's encoder folder."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer

from raexmc.data.dataset import Dataset
from raexmc.encoder.embedding import embed_split
from raexmc.encoder.text_encoder import TextEncoder
from raexmc.encoder.tokens import TokenCache, text_of
from raexmc.process_group import DistContext
from raexmc.training.rounds import embed_sharded
from raexmc.training.step import split_encoder
from test_predictor import build_pipeline, predictor_of

MAX_LEN = 16  # test_predictor's token cache and memory settings


def test_the_four_paths_give_one_text_the_same_vector(tmp_path, lf_folder, sentence_model):
    """A cls-pooled model with a Dense layer, so a path that pooled its own way would stand out. Each path gets the
    training inputs in one batch, longest first (the order the length-sorted loops take), so the same tensors go
    through the model and the vectors must agree to the bit; sentence-transformers is the independent reference."""
    built = build_pipeline(tmp_path, lf_folder, sentence_model("cls", dense=1), "exact")
    predictor = predictor_of(built)
    encoder = predictor.encoder
    cache = TokenCache(built / "tokens")
    ids, lengths = cache.ids("train"), cache.lengths("train")
    assert lengths.max() < MAX_LEN, "no text cut, so sentence-transformers sees the same tokens"
    order = np.argsort(-lengths, kind="stable")
    texts = [text_of(record, "title+content") for record in Dataset(tmp_path / "data" / "tiny").texts("train")]

    embed_split(encoder, cache, "train", tmp_path / "train.npy", batch_size=len(order))
    embedded = np.load(tmp_path / "train.npy")
    mined = embed_sharded(encoder, ids, lengths, order, len(order), DistContext(0, 1, "cpu"))
    with torch.no_grad():  # the training path, in eval mode: without dropout
        trained = split_encoder(encoder, cache, "train")(order).float().numpy()
    predicted = encoder.embed_texts([texts[row] for row in order])

    np.testing.assert_array_equal(embedded[order], mined)
    np.testing.assert_array_equal(mined, trained)
    np.testing.assert_array_equal(trained, predicted)
    theirs = SentenceTransformer(str(built / "predictor" / "encoder"), device="cpu").encode(  # the saved model's
        [texts[row] for row in order])
    np.testing.assert_allclose(predicted, theirs, atol=1e-5 if encoder.precision == "fp32" else 3e-2)


def test_the_encoder_describes_the_settings_its_vectors_depend_on(tmp_path, sentence_model):
    encoder = TextEncoder.load(sentence_model("cls", dense=1), "cpu", "fp32", max_len=MAX_LEN)
    assert encoder.describe() == {"pooling": "cls pooling, Dense 32->16 Tanh, normalised", "dim": 16,
                                  "device": "cpu", "precision": "fp32", "max_len": MAX_LEN}
    rows_only = TextEncoder(encoder.model, "cpu", "bf16")
    assert rows_only.describe() == {"pooling": "cls pooling, Dense 32->16 Tanh, normalised", "dim": 16,
                                    "device": "cpu", "precision": "bf16"}
    with pytest.raises(ValueError, match="without a max_len"):
        rows_only.tokenize(["unix"])
