"""Training: the loss goes down on a tiny problem, checkpoints resume to the same weights, a real
2-process gloo group takes the step one process takes on the same global batch, gradient caching
takes the plain step, the history is the table DVC plots, and every train.* value is checked before any work."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from ruamel.yaml import YAML

from raexmc.data.dataset import Dataset
from raexmc.data.held_out import split_validation
from raexmc.data.sources import build_dataset
from raexmc.encoder.model import load_tokenizer
from raexmc.encoder.sentence import load_encoder
from raexmc.encoder.text_encoder import TextEncoder, batch_tensors
from raexmc.encoder.tokens import TokenCache, build_token_cache
from raexmc.errors import ConfigError
from raexmc.process_group import DistContext
from raexmc.settings import load_settings, read_params_tree, settings_from
from raexmc.training.settings import TrainSettings
from raexmc.training.step import BatchSampler, linear_schedule, plan_batch, training_step
from raexmc.training.train import as_table, train
from tests.helpers import REPO, TINY_TRAIN, free_port, make_lf_folder

SINGLE = DistContext(0, 1, "cpu")
PARAMS = REPO / "params.yaml"


def UNUSED_N() -> int:  # noqa: N802 (named as the constant it stands for)
    """The number of training inputs, which the default schedule (fixed) never asks for."""
    raise AssertionError("schedule: fixed must not read the data")


def build_tiny(folder: Path, tiny_model: Path) -> tuple[Dataset, TokenCache]:
    build_dataset("tiny", {"source": "local", "path": str(make_lf_folder(folder / "lf"))}, folder / "tiny", "")
    dataset = Dataset(folder / "tiny")
    build_token_cache(dataset, load_tokenizer(str(tiny_model)), "tiny", folder / "tokens", 16, 8,
                      "title+content", "title")
    return dataset, TokenCache(folder / "tokens")


@pytest.fixture
def tiny(tiny_model, tmp_path):
    return build_tiny(tmp_path, tiny_model)


def settings(**overrides) -> TrainSettings:
    """params.yaml's recipe, shrunk to the tiny problem."""
    return replace(TrainSettings.from_section(load_settings(PARAMS).train, UNUSED_N), **{**TINY_TRAIN, **overrides})


def run_training(tiny, model_dir: Path, checkpoint: Path, log=None, fingerprint: str = "fp", **overrides):
    """train() of the encoder in `model_dir` on the tiny problem: (its model, the rows `log` got, the history)."""
    dataset, cache = tiny
    torch.manual_seed(0)
    model = load_encoder(str(model_dir))
    logged = []
    history = train(TextEncoder(model, "cpu", "fp32"), cache, dataset.label_matrix("train"),
                    dataset.filter_matrix("train"), settings(**overrides), SINGLE, checkpoint, (0.55, 1.5),
                    log or (lambda step, values: logged.append((step, values))), fingerprint)
    assert [row["step"] for row in history][len(history) - len(logged):] == [step for step, _ in logged]
    return model, logged, history


def test_sampler_schedule_and_validation_split():
    """The sampler is deterministic per step and skips unlabelled inputs; the schedule warms up then decays to zero;
    validation is carved from the training inputs."""
    Y = sp.csr_matrix(np.array([[1, 0, 1], [0, 0, 0], [0, 1, 0]], dtype=np.float32))
    sampler = BatchSampler(Y, np.arange(3), seed=1)
    rows, positives = sampler.batch(5, 8)
    again = sampler.batch(5, 8)
    assert (rows == again[0]).all() and (positives == again[1]).all()
    assert 1 not in rows
    assert all(Y[r, p] == 1 for r, p in zip(rows, positives))
    factor = linear_schedule(2, 10)
    assert [round(factor(s), 3) for s in (0, 1, 2, 6, 10)] == [0.5, 1.0, 1.0, 0.5, 0.0]
    train_rows, val_rows = split_validation(sp.csr_matrix(np.eye(20, dtype=np.float32)), 0.25, 0)
    assert len(val_rows) == 5 and not set(train_rows) & set(val_rows) and len(train_rows) + 5 == 20


def test_training_lowers_the_loss_and_logs_validation(tiny, tiny_model, tmp_path):
    model, logged, _ = run_training(tiny, tiny_model, tmp_path / "ckpt.pt", max_steps=12, hnm_steps=4)
    losses = [values["loss"] for step, values in logged if "loss" in values]
    assert losses[-1] < losses[0], logged
    assert {"val_rae_P@1", "val_dual_encoder_P@1", "val_knn_P@1", "elapsed_s"} <= set(logged[-1][1])
    assert (tmp_path / "ckpt.pt").is_file()


def test_validation_queries_at_most_val_max_queries_of_the_held_out_inputs(tiny, tiny_model, tmp_path):
    """val_fraction 0.5 holds out 2 of the 4 tiny training inputs (never memory keys); a cap of 1
    lets one of them query, without the cap both do, and a cap of 0 none (the rounds still run, without validating)."""
    _, capped, _ = run_training(tiny, tiny_model, tmp_path / "a.pt", val_fraction=0.5, val_max_queries=1)
    _, whole, _ = run_training(tiny, tiny_model, tmp_path / "b.pt", val_fraction=0.5)
    _, none, _ = run_training(tiny, tiny_model, tmp_path / "c.pt", val_fraction=0.5, val_max_queries=0)
    assert {values["val_queries"] for _, values in capped if "val_queries" in values} == {1}
    assert {values["val_queries"] for _, values in whole if "val_queries" in values} == {2}
    assert [values for _, values in none if "val_queries" in values] == [] and len(none) == len(whole)
    assert {values["val_rae_P@1"] for _, values in capped if "val_queries" in values} <= {0.0, 100.0}


def test_without_validate_last_the_curve_ends_at_the_last_mining_round(tiny, tiny_model, tmp_path):
    _, logged, history = run_training(tiny, tiny_model, tmp_path / "ckpt.pt", validate_last=False)
    assert [row["step"] for row in history] == [0, 3], "rounds at steps 0 and 3; none after step 6"
    assert "val_rae_P@1" in logged[-1][1]


def test_a_mining_round_mines_only_the_inputs_its_steps_draw(tiny, tiny_model, tmp_path):
    """One input per step, a round per step: the checkpoint after step 2 holds the negatives mined at
    step 1, for the one input step 1 draws and no other."""
    dataset, _ = tiny
    run_training(tiny, tiny_model, tmp_path / "ckpt.pt", batch_size=1, max_steps=2, hnm_steps=1, val_fraction=0.0,
                 validate_last=False)
    negatives = torch.load(tmp_path / "ckpt.pt", weights_only=False)["negatives"]
    Y = dataset.label_matrix("train")
    drawn, _ = BatchSampler(Y, np.arange(Y.shape[0]), settings().seed).batch(1, 1)
    assert np.flatnonzero((negatives >= 0).any(axis=1)).tolist() == drawn.tolist()


def test_as_table_gives_every_row_every_column_with_none_where_a_round_had_no_value():
    history = [{"step": 0, "elapsed_s": 1.0, "val_rae_P@1": 40.0},
               {"step": 2, "elapsed_s": 3.0, "loss": 1.5, "lr": 1e-4, "val_rae_P@1": 45.0},
               {"step": 4, "elapsed_s": 5.0, "loss": 1.2, "val_rae_P@1": 50.0}]
    assert as_table(history) == [
        {"elapsed_s": 1.0, "loss": None, "lr": None, "step": 0, "val_rae_P@1": 40.0},
        {"elapsed_s": 3.0, "loss": 1.5, "lr": 1e-4, "step": 2, "val_rae_P@1": 45.0},
        {"elapsed_s": 5.0, "loss": 1.2, "lr": None, "step": 4, "val_rae_P@1": 50.0}]
    assert as_table([]) == []


def test_an_encoder_trained_with_its_pooling_and_dense_layer_is_saved_with_them(tiny, sentence_model, tmp_path):
    """Training moves the Dense layer too (the gradient flows through pooling and Dense); the saved folder gives
    the trained vectors back, here and in sentence-transformers (the independent reader of its layout)."""
    from sentence_transformers import SentenceTransformer

    dataset, cache = tiny
    source = sentence_model("lasttoken", dense=1)
    before = load_encoder(str(source)).dense[0].linear.weight.detach()
    model, _, _ = run_training(tiny, source, tmp_path / "ckpt.pt", max_steps=2)
    assert not torch.allclose(model.dense[0].linear.weight, before, rtol=0, atol=1e-6), \
        "the Dense layer must have been trained"
    model.save(tmp_path / "saved")
    load_tokenizer(str(source)).save_pretrained(tmp_path / "saved")
    rows = np.arange(len(cache.lengths("labels")))
    with torch.inference_mode():
        trained = model.eval()(*batch_tensors(cache.ids("labels"), cache.lengths("labels"), rows, "cpu"))
        reloaded = load_encoder(str(tmp_path / "saved"))(*batch_tensors(cache.ids("labels"), cache.lengths("labels"),
                                                                          rows, "cpu"))
    torch.testing.assert_close(reloaded, trained, atol=1e-6, rtol=0)
    titles = [record.title for record in dataset.texts("labels")]
    theirs = SentenceTransformer(str(tmp_path / "saved"), device="cpu").encode(titles)
    np.testing.assert_allclose(theirs, trained.numpy(), atol=1e-5)


class Killed(Exception):
    pass


def test_resume_reaches_the_same_weights_and_keeps_the_whole_curve_but_not_across_settings(tiny, tiny_model, tmp_path):
    full, _, full_history = run_training(tiny, tiny_model, tmp_path / "full.pt")

    def die_at_step_3(step, values):  # the round at step 3 comes after the checkpoint of step 2
        if step == 3:
            raise Killed

    with pytest.raises(Killed):
        run_training(tiny, tiny_model, tmp_path / "part.pt", die_at_step_3)
    assert torch.load(tmp_path / "part.pt", weights_only=False)["step"] == 2
    resumed, logged, history = run_training(tiny, tiny_model, tmp_path / "part.pt")
    assert logged[0][0] == 3, "resumed from step 2, first round at step 3"
    assert [row["step"] for row in history] == [row["step"] for row in full_history] == [0, 3, 6]
    for (name, a), (_, b) in zip(full.state_dict().items(), resumed.state_dict().items()):
        assert torch.allclose(a, b, atol=1e-6), name
    _, logged, _ = run_training(tiny, tiny_model, tmp_path / "part.pt", fingerprint="other settings", max_steps=2)
    assert logged[0][0] == 0, "a checkpoint of other settings is not resumed"


PRELUDE = """
import sys
from dataclasses import replace
from pathlib import Path

import torch
from raexmc.data.dataset import Dataset
from raexmc.encoder.sentence import load_encoder
from raexmc.encoder.text_encoder import TextEncoder
from raexmc.encoder.tokens import TokenCache
from raexmc.process_group import init_distributed, shutdown
from raexmc.settings import load_settings
from raexmc.training.settings import TrainSettings

params, data, tokens, model_dir, out = sys.argv[1:6]
recipe = TrainSettings.from_section(load_settings(params).train, lambda: 0)
"""
WORKER = PRELUDE + """
from raexmc.training.train import as_table, train

ctx = init_distributed("cpu")
torch.manual_seed(0)
model = load_encoder(model_dir)
dataset = Dataset(data)
settings = replace(recipe, batch_size=2, grad_cache_chunk=0, lr=1e-3, max_steps=4, warmup_steps=1, hnm_steps=2,
                   hnm_topk=3, num_hard_negatives=1, val_fraction=0.25, val_b=10, checkpoint_every=2,
                   embed_batch_size=3)
train(TextEncoder(model, ctx.device, "fp32"), TokenCache(tokens), dataset.label_matrix("train"),
      dataset.filter_matrix("train"), settings, ctx, Path(out) / "ckpt.pt", (0.55, 1.5), lambda *a: None, "fp")
torch.save(model.state_dict(), Path(out) / f"rank{ctx.rank}.pt")
shutdown(ctx)
"""


def torchrun(script: Path, *args, nproc: int = 2) -> None:
    """Run `script` (with `args`) in a real `nproc`-process gloo group, one CPU thread each."""
    launcher = ["-m", "torch.distributed.run", f"--nproc_per_node={nproc}", f"--master_port={free_port()}"]
    proc = subprocess.run([sys.executable, *(launcher if nproc > 1 else []), str(script), *map(str, args)],
                          capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.slow  # several stage or torchrun processes: CI's second step
def test_two_process_gloo_training_keeps_ranks_identical(tiny, tiny_model, tmp_path):
    dataset, cache = tiny
    (tmp_path / "worker.py").write_text(WORKER)
    torchrun(tmp_path / "worker.py", PARAMS, dataset.folder, cache.folder, tiny_model, tmp_path)
    rank0, rank1 = (torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1))
    initial = load_encoder(str(tiny_model)).state_dict()
    changed = 0
    for name in rank0:
        assert torch.equal(rank0[name], rank1[name]), name
        changed += not torch.equal(rank0[name], initial[name])
    assert changed > 0, "training must have moved the weights"


# --- One step: W processes and gradient caching against one plain process -------------------------

STEP_WORKER = PRELUDE + """
from raexmc.training.step import apply_gradients, make_optimizer, training_step

tests, global_batch, chunks = sys.argv[6], int(sys.argv[7]), [int(c) for c in sys.argv[8:]]
sys.path[:0] = [tests, str(Path(tests).parents[1])]  # this test file, and the tests package it imports
from test_train import gradients, the_batch

ctx = init_distributed("cpu")
Y = Dataset(data).label_matrix("train")
rows, positives, negatives = the_batch(Y, global_batch)
for chunk in chunks:
    settings = replace(recipe, batch_size=global_batch // ctx.world_size, grad_cache_chunk=chunk, lr=1e-3,
                       warmup_steps=0, max_steps=10, grad_clip=0.01)
    model = load_encoder(model_dir).train()
    weights = [p for p in model.parameters() if p.requires_grad]
    optimizer, scheduler = make_optimizer(weights, settings)
    loss = training_step(TextEncoder(model, ctx.device, "fp32"), TokenCache(tokens), Y, rows, positives, negatives,
                         settings, ctx)
    grads = gradients(model)
    norm = apply_gradients(weights, optimizer, scheduler, settings.grad_clip)
    torch.save({"loss": float(loss), "grads": grads, "norm": norm, "weights": model.state_dict()},
               Path(out) / f"w{ctx.world_size}_chunk{chunk}_rank{ctx.rank}.pt")
shutdown(ctx)
"""
GLOBAL_BATCH, CHUNK = 8, 2  # per rank at W=2: 4 inputs in chunks of 2+2, 3 labels (padded) in 2+1


def the_batch(Y: sp.csr_matrix, size: int = GLOBAL_BATCH) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The batch of these tests: rows, sampled positives, two random negatives per input (-1 = none)."""
    rows, positives = BatchSampler(Y, np.arange(Y.shape[0]), seed=0).batch(0, size)
    return rows, positives, np.random.default_rng(0).integers(-1, Y.shape[1], size=(Y.shape[0], 2))


def gradients(model) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.fixture(scope="module")
def no_dropout_model(tiny_model, tmp_path_factory) -> Path:
    """The tiny random BERT with dropout 0, so one process and two see the same network."""
    from transformers import AutoModel

    folder = tmp_path_factory.mktemp("no-dropout")
    model = AutoModel.from_pretrained(tiny_model, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def one_step(tiny_model, no_dropout_model, tmp_path_factory):
    """The step the worker takes as 1 plain process and as a real 2-process gloo group, plain and
    with gradient caching: {(world size, chunk, rank): {"loss", "grads", "norm", "weights"}}."""
    folder = tmp_path_factory.mktemp("one-step")
    dataset, cache = build_tiny(folder, tiny_model)
    (folder / "step.py").write_text(STEP_WORKER)
    for nproc in (1, 2):
        torchrun(folder / "step.py", PARAMS, dataset.folder, cache.folder, no_dropout_model, folder,
                 Path(__file__).parent, GLOBAL_BATCH, 0, CHUNK, nproc=nproc)
    return {(w, chunk, rank): torch.load(folder / f"w{w}_chunk{chunk}_rank{rank}.pt")
            for w, rank in ((1, 0), (2, 0), (2, 1)) for chunk in (0, CHUNK)}


def assert_same_step(step: dict, reference: dict, what: str) -> None:
    # fp32 sums in another order: the loss (near 3.3, a unit in its last place 2.4e-7) within some 20 such units, the
    # gradient norm (near 49) within 1e-5 of itself
    assert step["loss"] == pytest.approx(reference["loss"], abs=5e-6), what
    assert step["norm"] == pytest.approx(reference["norm"], abs=5e-4), f"{what}: gradient norm before clipping"
    assert_same_gradients(step["grads"], reference["grads"], what)
    # Adam's first update is lr·g/(|g| + eps): where the clipped g is near eps, float noise in g
    # moves the update by a fraction of lr (1e-3; seen: up to 0.05%), so weights agree to 1% of lr.
    for name, weight in reference["weights"].items():
        torch.testing.assert_close(step["weights"][name], weight, rtol=0, atol=1e-5,
                                   msg=lambda m: f"{what}, weight {name}: {m}")


def assert_same_gradients(got: dict, expected: dict, what: str) -> None:
    """Equal to float32 rounding: sums in another order differ by ~1e-7 of the largest entry."""
    assert got.keys() == expected.keys(), what
    scale = max(float(g.abs().max()) for g in expected.values())
    for name, grad in expected.items():
        torch.testing.assert_close(got[name], grad, rtol=1e-4, atol=1e-5 * scale,
                                   msg=lambda m: f"{what}, grad {name}: {m}")


@pytest.mark.slow  # several stage or torchrun processes: CI's second step
def test_two_processes_and_gradient_caching_take_the_step_of_one_plain_process_on_the_same_global_batch(one_step):
    reference = one_step[(1, 0, 0)]
    assert reference["norm"] > 10 * 0.01, "clipping must bite for the weights to test it"
    assert_same_step(one_step[(1, CHUNK, 0)], reference, "1 process, gradient caching")
    for rank in (0, 1):
        assert_same_step(one_step[(2, 0, rank)], reference, f"2 processes, rank {rank}")
        assert_same_step(one_step[(2, CHUNK, rank)], reference, f"2 processes, gradient caching, rank {rank}")
    for name, weight in one_step[(2, 0, 0)]["weights"].items():
        assert torch.equal(weight, one_step[(2, 0, 1)]["weights"][name]), f"ranks differ in {name}"


def step_gradients(model, tiny, chunk: int, seed: int, device: str = "cpu") -> dict[str, torch.Tensor]:
    dataset, cache = tiny
    Y = dataset.label_matrix("train")
    torch.manual_seed(seed)
    training_step(TextEncoder(model, device, "fp32"), cache, Y, *the_batch(Y),
                  settings(batch_size=GLOBAL_BATCH, grad_cache_chunk=chunk), DistContext(0, 1, device))
    return gradients(model)


def chunked_forward_gradients(model, tiny, chunk: int, seed: int, device: str = "cpu") -> dict[str, torch.Tensor]:
    """The reference for gradient caching with dropout: encode the same chunks in the same order
    (inputs, then labels), all with graph, then back-propagate the loss through all of them."""
    dataset, cache = tiny
    Y = dataset.label_matrix("train")
    plan = plan_batch(Y, *the_batch(Y), settings(batch_size=GLOBAL_BATCH), DistContext(0, 1, device))

    def encoded(split: str, rows: np.ndarray) -> torch.Tensor:
        return torch.cat([model(*batch_tensors(cache.ids(split), cache.lengths(split), part, device))
                          for part in np.split(rows, range(chunk, len(rows), chunk))])

    torch.manual_seed(seed)
    model.zero_grad(set_to_none=True)
    x = encoded("train", plan.input_rows)  # inputs first, then labels: the first pass's order
    z = encoded("labels", plan.label_rows)
    plan.loss(x, z).backward()
    return gradients(model)


CUDA = pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"))


@pytest.mark.parametrize("device", ["cpu", CUDA])
def test_gradient_caching_with_dropout_replays_the_first_pass_masks(tiny, tiny_model, device):
    """On CUDA the dropout masks come from the GPU's generator, which the replay must restore too."""
    model = load_encoder(str(tiny_model), device).train()  # dropout 0.1
    assert model.transformer.config.hidden_dropout_prob > 0
    reference = chunked_forward_gradients(model, tiny, CHUNK, 3, device)
    other_masks = chunked_forward_gradients(model, tiny, CHUNK, 4, device)
    assert any(not torch.allclose(reference[n], other_masks[n], rtol=0, atol=1e-6) for n in reference), \
        "dropout must change gradients"
    assert_same_gradients(step_gradients(model, tiny, CHUNK, 3, device), reference, "chunks of 2")
    # One chunk per split draws its masks exactly as the plain step does.
    assert_same_gradients(step_gradients(model, tiny, 64, 3, device), step_gradients(model, tiny, 0, 3, device),
                          "one chunk")


# --- train.* checks ---------------------------------------------------------------------------------

def params_with(**train_values) -> dict:
    data = read_params_tree(PARAMS)
    data["train"].update(train_values)
    return data


def test_every_setting_comes_from_params_yaml_and_ints_serve_as_floats():
    data = read_params_tree(PARAMS)
    assert TrainSettings.from_section(settings_from(data).train, UNUSED_N).tau == data["train"]["tau"]
    del data["train"]["tau"]
    with pytest.raises(ConfigError, match="train.tau: missing parameter"):
        settings_from(data)
    values = TrainSettings.from_section(settings_from(params_with(lr=1, grad_clip=float("inf"), nproc=2,
                                                                  device="cuda:1", embed_batch_size=512)).train,
                                        UNUSED_N)
    assert values.lr == 1.0 and isinstance(values.lr, float) and values.embed_batch_size == 512


@pytest.mark.parametrize("key, value", [
    ("batch_size", "abc"), ("batch_size", 0), ("batch_size", True), ("batch_size", 2.5), ("lr", -1e-4),
    ("lr", float("nan")), ("tau", 0), ("grad_clip", 0.0), ("max_steps", 0), ("hnm_steps", 0),
    ("num_hard_negatives", -1), ("hard_negatives", 1), ("val_fraction", 1.0), ("val_max_queries", -1),
    ("val_lambda", 1.5), ("validate_last", "no"), ("seed", -1), ("embed_batch_size", 0), ("embed_batch_size", "max"),
    ("grad_cache_chunk", -8), ("grad_cache_chunk", "16"), ("nproc", 0), ("nproc", "all"),
    ("device", "gpu"), ("precision", "fp8"), ("torchrun_args", None), ("batchsize", 8),
    ("schedule", "grow"), ("lr", "fast"), ("max_steps", "Auto"),
])
def test_a_bad_or_unknown_train_value_names_the_file_and_key(key, value):
    with pytest.raises(ConfigError) as error:
        settings_from(params_with(**{key: value}), "some/params.yaml")
    assert error.value.one_line().startswith(f"ConfigError: some/params.yaml:train.{key}: ")


def run_train_stage(tmp_path: Path, params: dict, env: dict | None = None,
                    timeout: int = 240) -> subprocess.CompletedProcess:
    """stages/train.py as dvc.yaml runs it, with `params` written to tmp_path/params.yaml and its outputs there."""
    YAML(typ="safe", pure=True).dump(params, tmp_path / "params.yaml")
    return subprocess.run([sys.executable, "stages/train.py", "--dataset", str(tmp_path / "data"), "--tokens",
                           str(tmp_path / "tokens"), "--out", str(tmp_path / "model"), "--checkpoints",
                           str(tmp_path / "checkpoints"), "--curves", str(tmp_path / "curves"), "--params",
                           str(tmp_path / "params.yaml")], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env=env)


def fine_tuned_params(tiny_model: Path, **train_values) -> dict:
    data = params_with(**train_values)
    data["encoder"].update(name=str(tiny_model), mode="fine-tuned")
    return data


def refused_before_any_work(proc: subprocess.CompletedProcess, tmp_path: Path) -> list[str]:
    """The lines of a train stage that exited 2 and wrote none of its outputs."""
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert not any((tmp_path / out).exists() for out in ("model", "checkpoints", "curves"))
    return proc.stderr.strip().splitlines()


@pytest.mark.parametrize("key, value", [("batch_size", "abc"), ("batchsize", 8),
                                        ("val_fraction", 0.0)])  # fine-tuning holds none out for the tune stage
def test_the_train_stage_rejects_bad_train_params_in_one_line_before_any_work(key, value, tiny_model, tmp_path):
    lines = refused_before_any_work(run_train_stage(tmp_path, fine_tuned_params(tiny_model, **{key: value})), tmp_path)
    assert len(lines) == 1 and lines[0].startswith(f"ConfigError: {tmp_path / 'params.yaml'}:train.{key}: "), lines


def test_the_train_stage_refuses_more_processes_than_gpus_in_one_line(tiny_model, tmp_path):
    """A preset's train.nproc=8 on a machine with fewer GPUs: one line naming train.nproc before torchrun starts
    ranks that would each fail on a GPU that is not there (CUDA_VISIBLE_DEVICES hides every GPU, so the machine
    has 0 whatever it is)."""
    proc = run_train_stage(tmp_path, fine_tuned_params(tiny_model, nproc=2, device="cuda"),
                           env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert refused_before_any_work(proc, tmp_path) == [
        f"ConfigError: {tmp_path / 'params.yaml'}:train.nproc: 2 processes, one per GPU, but no GPU is visible: "
        "run it where the GPUs are, or on the CPU (train.device: cpu)"]
