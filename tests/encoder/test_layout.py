"""Encoders pooled as their folders say: every path gives the vectors sentence-transformers itself gives for the
same folder (the independent reference), refuses what it cannot reproduce, and saves its recipe back."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from mlflow.tracking import MlflowClient
from sentence_transformers import SentenceTransformer

from raexmc.encoder.layout import POOLING_MODES, Pooling
from raexmc.encoder.model import load_tokenizer
from raexmc.encoder.sentence import load_encoder
from raexmc.encoder.text_encoder import TextEncoder, batch_tensors
from raexmc.encoder.tokens import RightPaddedTokenizer
from raexmc.errors import ConfigError
from test_embedding import run_embed_stage

# lengths 3 to 14 tokens in one batch, so every short row is padded
TEXTS = ["unix", "a unix-like kernel written for teaching", "python is a programming language",
         "gcc: the gnu compiler collection compiles c, c++, fortran and ada", "awk"]


def tokens(folder: Path | str, texts: list[str] = TEXTS) -> tuple[np.ndarray, np.ndarray]:
    return RightPaddedTokenizer(load_tokenizer(str(folder)), 64)(texts)


def ours(folder: Path | str, texts: list[str] = TEXTS) -> np.ndarray:
    ids, lengths = tokens(folder, texts)
    return TextEncoder(load_encoder(str(folder)), "cpu", "fp32").embed(ids, lengths, np.arange(len(texts)))


def theirs(folder: Path | str, texts: list[str] = TEXTS) -> np.ndarray:
    return SentenceTransformer(str(folder), device="cpu").encode(texts, batch_size=len(texts))


@pytest.mark.parametrize("dense", [0, 1])
@pytest.mark.parametrize("mode", POOLING_MODES)
def test_each_pooling_mode_alone_or_before_a_dense_layer_gives_the_vectors_sentence_transformers_gives(
        sentence_model, mode, dense):
    """A Dense layer (affine, then Tanh) sees the pooled vector's scale, which the final normalisation alone would
    hide: mean_sqrt_len_tokens divides by √n, not n, and only a layer after it shows which."""
    folder = sentence_model(mode, dense)
    assert dense or load_encoder(str(folder)).recipe == f"{mode} pooling, normalised"
    np.testing.assert_allclose(ours(folder), theirs(folder), atol=1e-5)


def test_dense_layers_and_one_without_a_bias_setting_give_the_vectors_sentence_transformers_gives(sentence_model,
                                                                                                   tmp_path):
    """sentence-transformers' Dense takes bias=True where its config.json has no `bias` key."""
    folder = sentence_model("cls", dense=2)
    model = load_encoder(str(folder))
    assert (model.dim, model.recipe) == (8, "cls pooling, Dense 32->16 Tanh, Dense 16->8 Tanh, normalised")
    got = ours(folder)
    assert got.shape == (len(TEXTS), 8)
    np.testing.assert_allclose(got, theirs(folder), atol=1e-5)
    folder = edited_copy(sentence_model("cls", dense=1), tmp_path / "model", "2_Dense/config.json",
                         lambda c: {k: v for k, v in c.items() if k != "bias"})
    assert load_encoder(str(folder)).dense[0].linear.bias is not None
    np.testing.assert_allclose(ours(folder), theirs(folder), atol=1e-5)


def test_a_plain_model_and_the_default_minilm_folder_are_mean_pooled_and_say_so_once(tiny_model):
    """sentence-transformers gives a folder without modules.json mean pooling too (and no Normalize: ours
    normalises all the same, as RAE compares unit vectors); MiniLM's folder is mean pooled and normalised."""
    reference = theirs(tiny_model)
    np.testing.assert_allclose(ours(tiny_model), reference / np.linalg.norm(reference, axis=1, keepdims=True),
                               atol=1e-5)
    twice = (f"from raexmc.encoder.sentence import load_encoder\n"
             f"for _ in range(2): assert load_encoder({str(tiny_model)!r}).recipe == 'mean pooling, normalised'")
    proc = subprocess.run([sys.executable, "-c", twice], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stderr.splitlines() if "modules.json" in line]
    assert notes == [f"encoder '{tiny_model}' has no sentence-transformers modules.json: mean pooling, as the paper"]
    assert load_encoder("all-MiniLM-L6-v2").recipe == "mean pooling, normalised"
    folder = load_tokenizer("all-MiniLM-L6-v2").name_or_path
    np.testing.assert_allclose(ours("all-MiniLM-L6-v2"), theirs(folder), atol=1e-5)


def test_last_token_pooling_takes_each_rows_last_real_token_not_a_pad():
    hidden = torch.arange(2 * 4 * 3, dtype=torch.float32).reshape(2, 4, 3)
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    assert torch.equal(Pooling("lasttoken")(hidden, mask), torch.stack([hidden[0, 2], hidden[1, 0]]))


def edited_copy(source: Path, target: Path, file: str, edit) -> Path:
    """A copy of model folder `source` whose JSON `file` is `edit(value)`."""
    shutil.copytree(source, target)
    path = target / file
    value = json.loads(path.read_text()) if path.is_file() else {}
    path.write_text(json.dumps(edit(value)))
    return target


REFUSED = {
    "an unknown module": ("modules.json", lambda m: m[:2] + [{"idx": 2, "name": "2", "path": "2_LayerNorm",
                                                             "type": "sentence_transformers.models.LayerNorm"}] + m[2:],
                          "modules.json:module 2: module LayerNorm"),
    "a module of another package": ("modules.json", lambda m: [m[0], {**m[1], "type": "my_models.Pooling"}, m[2]],
                                    "module type 'my_models.Pooling' is not a sentence-transformers module"),
    "an unknown pooling mode": ("1_Pooling/config.json", lambda c: {**c, "pooling_mode": "median"},
                                "pooling mode median cannot be reproduced"),
    "two pooling modes": ("1_Pooling/config.json", lambda c: {**c, "pooling_mode": ["cls", "max"]},
                          "pooling mode cls + max cannot be reproduced"),
    "lowercasing": ("sentence_bert_config.json", lambda c: {**c, "do_lower_case": True},
                    "sentence_bert_config.json:do_lower_case: do_lower_case is true"),
    "a default prompt": ("config_sentence_transformers.json",
                         lambda c: {**c, "prompts": {"query": "query: "}, "default_prompt_name": "query"},
                         "default_prompt_name is 'query'"),
    "a Dense layer on token states": ("2_Dense/config.json", lambda c: {**c, "module_input_name": "token_embeddings"},
                                      "a Dense layer on 'token_embeddings' cannot be reproduced"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_what_cannot_be_reproduced_is_refused_in_one_line_naming_it(sentence_model, tmp_path, case):
    file, edit, expected = REFUSED[case]
    source = sentence_model("cls", dense=1) if "Dense" in file else sentence_model("cls")
    folder = edited_copy(source, tmp_path / "model", file, edit)
    with pytest.raises(ConfigError) as refused:
        load_encoder(str(folder))
    message = str(refused.value)
    assert "\n" not in message and expected in message and str(folder) in message, message


def test_a_saved_encoder_carries_its_pooling_and_loads_back_alike_and_gradients_flow_as_in_sentence_transformers(
        sentence_model, tmp_path):
    """The same loss on our module's vectors and on sentence-transformers' (eval mode: no dropout) gives the same
    gradient in the Dense layer and in the transformer's embeddings."""
    source = sentence_model("lasttoken", dense=1)
    load_encoder(str(source)).save(tmp_path / "saved")
    load_tokenizer(str(source)).save_pretrained(tmp_path / "saved")
    modules = json.loads((tmp_path / "saved" / "modules.json").read_text())
    assert [(m["type"].rsplit(".", 1)[1], m["path"]) for m in modules] == [
        ("Transformer", ""), ("Pooling", "1_Pooling"), ("Dense", "2_Dense"), ("Normalize", "3_Normalize")]
    assert json.loads((tmp_path / "saved" / "1_Pooling" / "config.json").read_text())["pooling_mode_lasttoken"]
    expected = theirs(source)
    np.testing.assert_allclose(ours(tmp_path / "saved"), expected, atol=1e-5)
    np.testing.assert_allclose(theirs(tmp_path / "saved"), expected, atol=1e-5)
    probe = torch.randn(16, generator=torch.Generator().manual_seed(0))
    model = load_encoder(str(source))
    model(*batch_tensors(*tokens(source), np.arange(len(TEXTS)), "cpu")).matmul(probe).square().sum().backward()
    reference = SentenceTransformer(str(source), device="cpu")
    features = reference.tokenize(TEXTS)
    reference(features)["sentence_embedding"].matmul(probe).square().sum().backward()
    dense, their_dense = model.dense[0].linear.weight.grad, reference[2].linear.weight.grad
    words = model.transformer.embeddings.word_embeddings.weight.grad
    their_words = reference[0].auto_model.embeddings.word_embeddings.weight.grad
    assert dense.abs().sum() > 0 and words.abs().sum() > 0
    torch.testing.assert_close(dense, their_dense, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(words, their_words, atol=1e-5, rtol=1e-4)


def test_a_saved_encoder_cuts_long_inputs_where_sentence_transformers_does(tiny_model, tmp_path):
    """sentence_bert_config.json carries the max length inputs are tokenised at: without it sentence-transformers
    cuts at the model's own limit (128 tokens for the tiny BERT), so a longer input's vector differs."""
    max_len = 16
    TextEncoder.load(tiny_model, "cpu", "fp32", max_len=max_len).save(tmp_path / "saved")
    assert json.loads((tmp_path / "saved" / "sentence_bert_config.json").read_text()) == {
        "max_seq_length": max_len, "do_lower_case": False}
    texts = [" ".join(TEXTS * 8), *TEXTS]
    assert len(load_tokenizer(str(tiny_model))(texts[0])["input_ids"]) > 128
    expected = TextEncoder.load(tmp_path / "saved", "cpu", "fp32", max_len=max_len).embed_texts(texts)
    got = SentenceTransformer(str(tmp_path / "saved"), device="cpu").encode(texts, batch_size=len(texts))
    cosine = (expected * got).sum(axis=1) / np.linalg.norm(expected, axis=1) / np.linalg.norm(got, axis=1)
    assert cosine.min() >= 0.9999, cosine


def test_the_embed_stage_pools_as_the_folder_says_and_records_the_pooling(sentence_model, token_cache, tmp_path):
    folder = sentence_model("cls", dense=1)
    stage = run_embed_stage(tmp_path, folder, token_cache)
    assert stage.returncode == 0, stage.stderr
    labels = np.load(tmp_path / "embeddings" / "labels.npy")
    assert labels.shape == (5, 16)
    assert json.loads((tmp_path / "embeddings" / "meta.json").read_text())["dim"] == 16
    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    [run] = client.search_runs([client.get_experiment_by_name("rae-xmc").experiment_id])
    assert run.data.params["encoder.pooling"] == "cls pooling, Dense 32->16 Tanh, normalised"
    assert (run.data.params["embed.encoder.dim"], run.data.params["embed.encoder.precision"]) == ("16", "fp32")
