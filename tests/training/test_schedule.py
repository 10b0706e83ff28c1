"""train.schedule: the auto rule against hand-worked values, numbers winning over auto (a preset runs as
printed), fixed leaving today's recipe, and a real train stage run handing the resolved values to the trainer
and to MLflow."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from mlflow.tracking import MlflowClient
from ruamel.yaml import YAML
from transformers import BertConfig, DistilBertConfig

from raexmc.data.sources import build_dataset
from raexmc.io.atomic import EMPTY_MARK
from raexmc.pipeline.presets import preset_values, presets_path
from raexmc.settings import load_settings, settings_from
from raexmc.training.graph_memory import grad_cache_chunk, graph_bytes_per_text, resolve_grad_cache
from raexmc.training.schedule import Schedule, resolve
from raexmc.training.settings import TrainSettings
from test_train import UNUSED_N, fine_tuned_params, params_with, run_train_stage
from tests.helpers import REPO


# Worked by hand from the rule in docs/pipeline.md. N = 21,000: 21,000 / 80 = 262.5, log2 8.04, batch 256;
# lr 1e-4 x min(sqrt(256 / 32) = 2.83, 2) = 2e-4; 12 x 21,000 / 256 = 984.4 steps, 1,000 in hundreds; warm-up
# 100; mining every ceil(1,000 / 3) = 334. FOLDOC's 8,227: 102.8 -> 2^6.68 -> 128; 771.3 -> 800. 5,000: 62.5 ->
# 2^5.97 -> 64; lr 1e-4 x sqrt(2); 937.5 -> 900. 500: 6.25 -> 8, raised to 32; 187.5 -> 200, raised to 300.
# 2,248,619 (LF-AmazonTitles-1.3M): 28,108 -> 32,768, cut to 512; 52,702 steps, cut to 20,000.
# On 8 processes the global batch of 256 is split: 32 each.
@pytest.mark.parametrize("n_train, processes, expected", [
    (21_000, 1, Schedule(256, 2e-4, 1000, 100, 334)),
    (8_227, 1, Schedule(128, 2e-4, 800, 80, 267)),
    (5_000, 1, Schedule(64, 1.4142135623730951e-4, 900, 90, 300)),
    (500, 1, Schedule(32, 1e-4, 300, 30, 100)),
    (2_248_619, 1, Schedule(512, 2e-4, 20_000, 2_000, 6_667)),
    (21_000, 8, Schedule(32, 2e-4, 1000, 100, 334)),
])
def test_the_auto_rule_gives_the_hand_worked_schedule(n_train, processes, expected):
    resolved = resolve("auto", n_train, processes, {})
    assert resolved == Schedule(expected.batch_size, pytest.approx(expected.lr, abs=1e-12), expected.max_steps,
                                expected.warmup_steps, expected.hnm_steps)


def test_chosen_numbers_win_and_the_rest_follow_them():
    # batch 64 at N = 21,000: lr 1e-4 x sqrt(2); 12 x 21,000 / 64 = 3,937.5 -> 3,900 steps, 390, 1,300
    assert resolve("auto", 21_000, 1, {"batch_size": 64}) == Schedule(
        64, pytest.approx(1.4142135623730951e-4, abs=1e-12), 3900, 390, 1300)
    # 500 steps: warm-up 50, mining every ceil(166.7) = 167; the batch and lr stay the rule's
    assert resolve("auto", 21_000, 1, {"max_steps": 500}) == Schedule(256, pytest.approx(2e-4, abs=1e-12), 500, 50, 167)
    assert resolve("auto", 21_000, 1, {"warmup_steps": 0}).warmup_steps == 0


def test_the_default_is_fixed_and_keeps_the_recipe_params_yaml_had_and_a_preset_runs_as_printed_under_auto():
    """Before train.schedule, params.yaml held batch_size 32, lr 1e-4, max_steps 300, warmup_steps 30 and
    hnm_steps 100: fixed must give them, without reading the data."""
    settings = TrainSettings.from_section(load_settings(REPO / "params.yaml").train, UNUSED_N, 4)
    assert settings.schedule == Schedule(32, 1e-4, 300, 30, 100)
    # a preset runs as printed under auto: the paper's LF-AmazonTitles-131K row (8 GPUs x 896, lr 3e-4, 3K steps,
    # mining every 1K), applied as `raexmc preset` applies it, with that set's 294,805 training inputs
    data = params_with(schedule="auto")
    for key, value in preset_values(presets_path(REPO / "params.yaml"), "LF-AmazonTitles-131K").items():
        section, _, name = key.partition(".")
        data[section][name] = value
    settings = TrainSettings.from_section(settings_from(data).train, lambda: 294_805, 8)
    assert settings.schedule == Schedule(896, 3e-4, 3000, 300, 1000)  # warm-up: the rule's 10% of the steps


@pytest.mark.slow  # several stage or torchrun processes: CI's second step
def test_the_train_stage_hands_the_resolved_schedule_to_the_trainer_and_mlflow(tiny_model, tmp_path):
    """A real fine-tuning run of the stage on 5,000 synthetic inputs with schedule: auto and max_steps chosen
    (4, to keep it short): batch 64 and lr 1e-4 x sqrt(2) (by hand, above), warm-up round(0.4) = 0, mining every
    ceil(4 / 3) = 2 steps. The trainer's scheduler starts from that lr, mines at steps 0 and 2, and stops at 4."""
    build_dataset("syn", {"source": "synthetic", "n_train": 5000, "n_test": 10, "n_labels": 300,
                          "labels_per_input": 2, "input_words": [4, 8], "label_words": [4, 6], "topic_size": 32,
                          "vocab_size": 2000, "seed": 0}, tmp_path / "data", "")
    data = fine_tuned_params(tiny_model, schedule="auto", max_steps=4, val_max_queries=0, validate_last=False,
                             hnm_topk=5, checkpoint_every=4, embed_batch_size=512)
    data["tokenize"].update(input_fields="title", input_max_len=16, label_max_len=8)
    YAML(typ="safe", pure=True).dump(data, tmp_path / "params.yaml")
    subprocess.run([sys.executable, "stages/tokenize_texts.py", "--dataset", str(tmp_path / "data"), "--out",
                    str(tmp_path / "tokens"), "--params", str(tmp_path / "params.yaml")],
                   cwd=REPO, check=True, capture_output=True, timeout=240)
    proc = run_train_stage(tmp_path, data, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = ("train schedule (auto, N=5,000 training inputs): global batch 64 (64 x 1 process(es)), lr 0.000141, "
            "4 steps, warm-up 0, mining every 2 steps, no gradient caching")
    assert line in proc.stderr.splitlines()

    state = torch.load(tmp_path / "checkpoints" / "last.pt", weights_only=False)
    assert state["step"] == 4
    assert state["scheduler"]["base_lrs"] == [pytest.approx(1.4142135623730951e-4, abs=1e-12)]
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")  # not the process-wide URI
    [run] = client.search_runs([client.get_experiment_by_name("rae-xmc").experiment_id])
    # a row a mining round (no validation here, so no curve file: MLflow holds the rows)
    assert [m.step for m in client.get_metric_history(run.info.run_id, "train/elapsed_s")] == [0, 2]
    assert [path.name for path in (tmp_path / "curves").iterdir()] == [EMPTY_MARK], "no curve: the placeholder alone"
    logged = run.data.params
    assert (logged["train.schedule"], logged["train.batch_size"]) == ("auto", "auto")
    resolved = ("batch_size", "max_steps", "warmup_steps", "hnm_steps", "grad_cache_chunk")
    assert {key: logged[f"train.resolved.{key}"] for key in resolved} \
        == {"batch_size": "64", "max_steps": "4", "warmup_steps": "0", "hnm_steps": "2", "grad_cache_chunk": "0"}
    assert float(logged["train.resolved.lr"]) == pytest.approx(1.4142135623730951e-4, abs=1e-12)


# --- grad_cache_chunk: auto -------------------------------------------------------------------------------

MINILM = BertConfig(hidden_size=384, num_attention_heads=12, num_hidden_layers=6)
# By hand, per layer and token 24 x 384 + 6 x 12 x tokens floats: a 128-token input 6 x 128 x 18,432 x 4 =
# 56,623,104 bytes in fp32, a 32-token label 6 x 32 x 11,520 x 4 = 8,847,360.
INPUT_FP32, LABEL_FP32 = 56_623_104, 8_847_360


def test_auto_caches_only_a_batch_over_the_budget_and_the_paper_preset_fits_an_h100():
    budget = 4 * 2**30
    # FOLDOC's default recipe: 32 inputs and 96 labels, 2,661,285,888 bytes, fit: no caching, as before
    assert grad_cache_chunk("auto", MINILM, "fp32", (32, 128), (96, 32), budget) == 0
    assert 32 * INPUT_FP32 + 96 * LABEL_FP32 <= budget
    # auto's 128 at FOLDOC: 10.6 GB; chunks of 4 GiB // 56,623,104 = 75 inputs (76 would be 4,303,355,904)
    assert grad_cache_chunk("auto", MINILM, "fp32", (128, 128), (384, 32), budget) == 75
    # bf16 keeps half: 4 GiB // 28,311,552 = 151
    assert grad_cache_chunk("auto", MINILM, "bf16", (128, 128), (384, 32), budget) == 151
    assert grad_cache_chunk(16, MINILM, "fp32", (512, 128), (1536, 32), budget) == 16, "a number is used as it is"
    assert grad_cache_chunk(0, MINILM, "fp32", (512, 128), (1536, 32), budget) == 0
    # the paper preset fits an H100 as it ran: DistilBERT at 896 inputs of 32 tokens and 2,688 labels, bf16:
    # 3,584 x 6 x 32 x (24 x 768 + 6 x 12 x 32) x 2 = 28,538,044,416 bytes, under 60% of 80 GB (it ran uncached,
    # peaking at 24.3 GB: docs/gpu.md)
    distilbert = DistilBertConfig()
    assert graph_bytes_per_text(distilbert, 32, "bf16") * 3584 == 28_538_044_416
    assert grad_cache_chunk("auto", distilbert, "bf16", (896, 32), (2688, 32), int(0.6 * 80e9)) == 0


def test_the_estimate_is_above_the_measured_graph():
    rows = json.loads((REPO / "bench" / "results" / "graph_memory.json").read_text())["rows"]
    for row in rows:
        assert graph_bytes_per_text(MINILM, row["tokens"], "fp32") / 1e6 >= row["measured_mb_per_text"]


def test_resolving_keeps_the_schedule_and_sizes_the_chunk_for_the_token_lengths():
    train = settings_from(params_with(schedule="auto")).train
    settings = TrainSettings.from_section(train, lambda: 8_227)   # batch 128, m = 2
    resolved = resolve_grad_cache(settings, MINILM, "fp32", {"input_max_len": 128, "label_max_len": 32}, "cpu")
    assert resolved.grad_cache_chunk == 75 and resolved.schedule == settings.schedule
    short = resolve_grad_cache(settings, MINILM, "fp32", {"input_max_len": 16, "label_max_len": 8}, "cpu")
    assert short.grad_cache_chunk == 0
