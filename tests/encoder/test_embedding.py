"""The encoder module and the length-sorted embedding of a token cache."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from mlflow.tracking import MlflowClient
from torch.nn.attention import SDPBackend

from raexmc.encoder.device import embed_batch_size, pick_device, resolve_precision
from raexmc.encoder.embedding import embed_split
from raexmc.encoder.model import load_tokenizer
from raexmc.encoder.sentence import attention_without_cudnn, load_encoder
from raexmc.encoder.text_encoder import TextEncoder, length_sorted_batches
from raexmc.encoder.tokens import TokenCache
from raexmc.errors import ConfigError, DataError
from tests.helpers import REPO, free_port, write_params


def test_encode_runs_the_encoder_without_cudnn_attention_and_restores_the_flags(tiny_model):
    """cuDNN's attention re-plans each new shape (1.7x slower MiniLM training steps, 3.5x slower embedding
    on an H200); the flags torch reads when it picks a kernel must say so inside the encoder, keep the
    user's other choices, and be as before outside."""
    model = load_encoder(str(tiny_model))
    seen = []
    flags = (torch.backends.cuda.cudnn_sdp_enabled, torch.backends.cuda.flash_sdp_enabled,
             torch.backends.cuda.mem_efficient_sdp_enabled, torch.backends.cuda.math_sdp_enabled)
    model.transformer.register_forward_pre_hook(lambda module, args: seen.append(tuple(flag() for flag in flags)))
    switches = (torch.backends.cuda.enable_cudnn_sdp, torch.backends.cuda.enable_flash_sdp,
                torch.backends.cuda.enable_mem_efficient_sdp, torch.backends.cuda.enable_math_sdp)
    was = tuple(flag() for flag in flags)

    def encode_with(*globally):
        for switch, on in zip(switches, globally):
            switch(on)
        with torch.inference_mode():
            model(torch.tensor([[101, 2000, 102]]), torch.ones(1, 3, dtype=torch.long))
        assert tuple(flag() for flag in flags) == globally, "the flags as they were after the call"
        return seen.pop()

    try:
        assert encode_with(True, True, True, True) == (False, True, True, True)
        assert encode_with(True, False, True, True) == (False, False, True, True), "a user's choice stays"
        for switch, on in zip(switches, (True, False, False, False)):
            switch(on)
        assert attention_without_cudnn() == [SDPBackend.CUDNN_ATTENTION], "cuDNN, where it is all a user allows"
        torch.backends.cuda.enable_cudnn_sdp(False)
        assert attention_without_cudnn() == [], "and none where the user allows none"
    finally:
        for switch, on in zip(switches, was):
            switch(on)


def test_batches_are_length_sorted_and_cover_every_row():
    lengths = np.array([3, 9, 1, 9, 4])
    batches = length_sorted_batches(lengths, 2)
    assert [b.tolist() for b in batches] == [[1, 3], [4, 0], [2]]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_embed_split_matches_one_text_at_a_time(token_cache, tiny_model, tmp_path, precision):
    cache, model = TokenCache(token_cache), load_encoder(str(tiny_model))
    report = embed_split(TextEncoder(model, "cpu", precision), cache, "train", tmp_path / "train.npy", batch_size=3)
    assert report["texts"] == 4 and report["texts_per_s"] > 0
    got = np.load(tmp_path / "train.npy")
    ids, lengths = cache.ids("train"), cache.lengths("train")
    for row in range(4):
        n = int(lengths[row])
        with torch.inference_mode():
            one = model(torch.tensor(ids[row:row + 1, :n].astype(np.int64)), torch.ones(1, n, dtype=torch.long))
        tolerance = 1e-5 if precision == "fp32" else 3e-2
        np.testing.assert_allclose(got[row], one[0].numpy(), atol=tolerance)


def run_embed_stage(folder: Path, model: Path, tokens: Path, batch_size: object = 4, dtype: str = "float32",
                    nproc: object = 1, torchrun_args: str = "", precision: str = "fp32", threads: int = 1,
                    env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """stages/embed.py in a subprocess, in `folder`, with these embed.* values (each as YAML reads its text) and
    `env` added to the environment, writing `folder`/embeddings."""
    from ruamel.yaml import YAML

    values = {"nproc": nproc, "precision": precision, "dtype": dtype, "batch_size": batch_size, "threads": threads}
    write_params(folder, **{f"embed.{key}": YAML(typ="safe", pure=True).load(str(value))
                            for key, value in values.items()},
                 **{"embed.torchrun_args": torchrun_args, "embed.device": "cpu"})
    return subprocess.run([sys.executable, str(REPO / "stages" / "embed.py"), "--model", str(model),
                           "--tokens", str(tokens), "--out", "embeddings"], cwd=folder, capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": str(threads), **(env or {})}, timeout=240)


def kernel_levels() -> list[str]:
    """The PyTorch CPU kernel levels this machine can run (ATEN_CPU_CAPABILITY's values), lowest first."""
    supported = {"avx2": torch.cpu._is_avx2_supported(), "avx512": torch.cpu._is_avx512_supported()}
    return ["default", *(level for level, ok in supported.items() if ok)]


@pytest.mark.slow  # several stage or torchrun processes: CI's second step
@pytest.mark.skipif(not torch.cpu._is_avx2_supported(), reason="the pinned kernels need AVX2")
def test_the_embed_stage_writes_the_same_bytes_under_every_kernel_level_and_thread_count(tmp_path, tiny_model,
                                                                                        token_cache):
    """A CPU's widest instructions pick PyTorch's kernels and MKL's, and each rounds differently: an AVX2 machine
    is this one with its kernel levels capped at AVX2. The stage pins both (raexmc.numerics), so every level this
    machine offers, capped the way an older CPU would be, gives the bytes of the machine's own, at 1 thread and
    at 2. Without the pin the levels differ in the last bits of the layer norms and products."""
    levels = kernel_levels()
    written = {}
    for level, threads in [*((level, 1) for level in levels), (levels[-1], 2)]:
        folder = tmp_path / f"{level}-{threads}"
        folder.mkdir()
        caps = {"ATEN_CPU_CAPABILITY": level, "MKL_ENABLE_INSTRUCTIONS": "AVX512" if level == "avx512" else "AVX2"}
        stage = run_embed_stage(folder, tiny_model, token_cache, threads=threads, env=caps)
        assert stage.returncode == 0, stage.stderr[-3000:]
        written[level, threads] = {split: (folder / "embeddings" / f"{split}.npy").read_bytes()
                                   for split in ("train", "labels", "test")}
    first = next(iter(written.values()))
    assert all(files == first for files in written.values()), sorted(written)


def last_line_only_error(stderr: str) -> str:
    """The last line of a stage's stderr, after checking no traceback came before it (MLflow may log)."""
    assert "Traceback" not in stderr, stderr
    return stderr.strip().splitlines()[-1]


@pytest.mark.slow  # several stage or torchrun processes: CI's second step
def test_two_processes_write_the_bytes_one_process_writes(tmp_path, tiny_model, token_cache):
    """Batches of 2 make 3 batches of the 5 labels and 1 of the 2 test inputs: the last round of a
    2-process group leaves rank 1 idle. MLflow's `embed/processes` shows the group really ran."""
    files = {}
    for nproc in (1, 2):
        folder = tmp_path / f"nproc{nproc}"
        folder.mkdir()
        port = f"--master_port={free_port()}" if nproc > 1 else ""  # one process stays out of torchrun
        stage = run_embed_stage(folder, tiny_model, token_cache, batch_size=2, nproc=nproc, torchrun_args=port)
        assert stage.returncode == 0, stage.stderr[-3000:]
        files[nproc] = {path.name: path.read_bytes() for path in (folder / "embeddings").iterdir()}
    assert sorted(files[1]) == ["labels.npy", "meta.json", "test.npy", "train.npy"]
    assert files[2] == files[1]
    assert np.load(tmp_path / "nproc2" / "embeddings" / "labels.npy").shape == (5, 32)
    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    runs = client.search_runs([client.get_experiment_by_name("rae-xmc").experiment_id], order_by=["start_time"])
    assert [run.data.metrics["embed/processes"] for run in runs] == [1, 2]


@pytest.mark.parametrize(("values", "key", "reason"), [
    *(({"nproc": nproc}, "nproc", f"must be 'auto' or {reason}") for nproc, reason in (
        ("0", "greater than or equal to 1, got 0"), ("all", "an integer, got 'all'"), ("1.5", "an integer, got 1.5"),
        ("true", "an integer, got True"))),
    ({"batch_size": 0}, "batch_size", "must be 'auto' or greater than or equal to 1, got 0"),
    ({"batch_size": -1}, "batch_size", "must be 'auto' or greater than or equal to 1, got -1"),
    ({"batch_size": "max"}, "batch_size", "must be 'auto' or an integer, got 'max'"),
    ({"dtype": "int8"}, "dtype", "must be 'float32' or 'float16', got 'int8'")])
def test_embed_stage_refuses_a_bad_setting_in_one_line(tmp_path, tiny_model, token_cache, values, key, reason):
    """A batch size of 0 used to end in a traceback; -1 and int8 used to exit 0 with all-zero embeddings."""
    stage = run_embed_stage(tmp_path, tiny_model, token_cache, **values)
    assert stage.returncode == 2, stage.stderr
    assert last_line_only_error(stage.stderr) == f"ConfigError: params.yaml:embed.{key}: {reason}"
    assert not (tmp_path / "embeddings").exists()


@pytest.mark.parametrize("broken, nproc", [("missing", 1), ("empty", 1), ("missing", 2)])
def test_embed_stage_names_a_missing_or_broken_model_folder(tmp_path, tiny_model, token_cache, broken, nproc):
    """--model is the train stage's output: a missing or empty folder is a DataError naming it, not an error about
    encoder.name (which embed does not read). Under torchrun it is read in the workers, after the relaunch: every
    rank fails, and the user sees the one line once (not torchrun's failure report), exit status 2, not 1."""
    model = tmp_path / "model"
    if broken == "empty":
        model.mkdir()
    port = f"--master_port={free_port()}" if nproc > 1 else ""
    stage = run_embed_stage(tmp_path, model, token_cache, nproc=nproc, torchrun_args=port)
    assert stage.returncode == 2, stage.stderr
    line = last_line_only_error(stage.stderr)
    assert line.startswith(f"DataError: {model}: ") and line.endswith("rerun the stage that writes it"), line
    assert stage.stderr.count(line) == 1 and "ChildFailedError" not in stage.stderr, stage.stderr
    assert not (tmp_path / "embeddings").exists()


def cut_weights(tiny_model: Path, folder: Path, weights: str, keep: int) -> Path:
    """A copy of the tiny encoder whose weights, as `weights` (safetensors, or torch.save's .bin), keep only
    their first `keep` bytes (-1: all but the last byte): a copy or a save cut short."""
    shutil.copytree(tiny_model, folder)
    if weights == "pytorch_model.bin":
        torch.save(load_encoder(str(tiny_model)).transformer.state_dict(), folder / weights)
        (folder / "model.safetensors").unlink()
    data = (folder / weights).read_bytes()
    (folder / weights).write_bytes(data[:keep])
    return folder / weights


@pytest.mark.parametrize("keep", [0, 8, 4096, -1])
@pytest.mark.parametrize("weights", ["model.safetensors", "pytorch_model.bin"])
def test_cut_encoder_weights_are_one_line_naming_the_file(tmp_path, tiny_model, weights, keep):
    """safetensors' SafetensorError and torch.load's errors (a cut zip archive or pickle) went past the
    load check as a traceback in predict, serve and embed. Now: the weights file named, and what writes it;
    as encoder.name (not a stage's output), a ConfigError naming the key and the file."""
    path = cut_weights(tiny_model, tmp_path / "model", weights, keep)
    with pytest.raises(DataError) as damaged:
        load_encoder(str(tmp_path / "model"), stage_output=True)
    line = damaged.value.one_line()
    assert line.startswith(f"DataError: {path}: cannot read the encoder's weights (") and "\n" not in line, line
    assert line.endswith("): rerun the stage that writes it"), line
    with pytest.raises(ConfigError) as configured:
        load_encoder(str(tmp_path / "model"))
    line = configured.value.one_line()
    assert line.startswith(f"ConfigError: params.yaml:encoder.name: cannot read the encoder's weights {path} ("), line
    assert "\n" not in line


def broken_encoder(tiny_model: Path, folder: Path, value: float) -> Path:
    """The tiny encoder with its last LayerNorm's weight and bias set to `value`: 0 makes every hidden
    state (so every embedding) zero, NaN makes them NaN."""
    model = load_encoder(str(tiny_model))
    norm = model.transformer.encoder.layer[-1].output.LayerNorm
    with torch.no_grad():
        norm.weight.fill_(value)
        norm.bias.fill_(value)
    model.save(folder)
    load_tokenizer(str(tiny_model)).save_pretrained(folder)
    return folder


@pytest.mark.parametrize(("value", "what"), [(0.0, "is all zero"), (float("nan"), "is not finite")])
def test_embed_stage_refuses_degenerate_embeddings_and_commits_nothing(tmp_path, tiny_model, token_cache,
                                                                       value, what):
    model = broken_encoder(tiny_model, tmp_path / "broken", value)
    stage = run_embed_stage(tmp_path, model, token_cache)
    assert stage.returncode == 2, stage.stderr
    line = last_line_only_error(stage.stderr)
    assert line.startswith(f"DataError: {token_cache / 'train.ids.npy'}:row ") and what in line
    assert not (tmp_path / "embeddings").exists()


def test_a_bad_device_names_where_it_was_set_int8_is_refused_on_a_gpu_and_an_auto_embed_batch_is_1024_or_256():
    """The batch sizes bench/results/embed_speed.json measured (1024: 2.4x the texts/s of 256 on one H200), on a GPU
    and on a CPU; a number set by the user stays, whatever the device."""
    for name in ("gpu0", "cuda:x", "CPU", ""):
        with pytest.raises(ConfigError, match=r"params.yaml:embed.device: device must be auto, cpu, cuda or cuda:N"):
            pick_device(name, "params.yaml", "embed.device")
    with pytest.raises(ConfigError, match="int8' runs on the CPU only, the device is cuda: set the device to cpu"):
        resolve_precision("int8", "cuda")
    assert [embed_batch_size("auto", device) for device in ("cuda", "cuda:1", "cpu")] == [1024, 1024, 256]
    assert embed_batch_size(64, "cuda") == 64 and embed_batch_size(64, "cpu") == 64


@pytest.mark.skipif(sys.platform != "linux", reason="the driver files are Linux's")
def test_auto_device_without_a_gpu_driver_is_the_cpu_before_torch_is_imported(tmp_path):
    """A stage that only asks for the device (index, memory) must not pay torch's import where no driver is; where
    one is, the answer is torch's own."""
    probe = ("import sys\nfrom raexmc.encoder import device\ndevice.GPU_DRIVER_FILES = (sys.argv[1],)\n"
             "print(device.pick_device('auto'), 'torch' in sys.modules)\n"
             "import torch\nprint(torch.cuda.is_available())")
    answers = {}
    for name, driver in (("none", tmp_path / "missing"), ("present", tmp_path)):
        run = subprocess.run([sys.executable, "-c", probe, str(driver)], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONPATH": str(REPO / "src")})
        answers[name] = run.stdout.split()
    assert answers["none"][:2] == ["cpu", "False"]
    torch_sees_a_gpu = answers["present"][2] == "True"
    assert answers["present"][:2] == ["cuda" if torch_sees_a_gpu else "cpu", "True"]
