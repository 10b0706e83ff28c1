"""The cost model of docs/scale.md: CPU time, peak memory and disk per stage for a dataset shape and encoder.

    python scripts/cost_model.py        # writes bench/results/cost_model.json, prints the tables of docs/scale.md

Each stage's cost is a formula in the shape (N training inputs, T test inputs, L labels, t tokens per
text) and the encoder (width d, layers), with constants fitted on the runs that
bench/stage_resources.py recorded here (2 cores). Time is CPU seconds (user + system), which other jobs
on the cores hardly change; the stages that use every core take about CPU / cores of wall time.

- embed: a·(N + T + L)·t·layers·(24·d² + 4·t·d) + c·(N + T + L)·t·layers·d
  (the FLOPs of the encoder's matrix products; the element-wise work per token and layer)
- index: W·(a·d + c) with W = efC·Σ n·ln(n) over the inputs and the labels   (HNSW inserts)
- tune: W·(a·d + c) with W = Q·(N + L)   (the exact validation search; Q = min(5% of N, val_max_queries))
- evaluate: a·T·efS·(ln N + ln L)·d + c·T·b·(1 + labels per input)   (two HNSW searches per test query;
  the label scores of its b keys, a training input's key carrying its labels, in every ranking)
a is the cost that grows with the width (dot products, matrix products), c the one that does not
(graph walks, memory traffic, scoring). a and c come from the two 131K runs (d = 64, 2 layers and
d = 384, 1 layer). The check: a alone fitted on the d = 64 run (cost proportional to d), beside the
measured 384 run. The 1.3M runs at d = 64 check the growth in N; their index, built at efC = 100 to fit
a session, is scaled by the efC = 500 / 100 ratio measured at 131K. The index is the exception: its
inserts slow down as the graph outgrows the caches, faster than N·ln(N) says, so its cost carries a
factor (N / N_131K)^γ, γ fitted on the median 1.3M build (the only stage whose 1.3M check is not
independent of its fit).

The train stage (fine-tuned) is modelled in wall seconds on our 2 fp32 cores (it uses both), for the schedule
the stage resolves from params.yaml (train.schedule fixed or auto, via TrainSettings.from_section):
  steps · a_step · B · passes · layers · [t_in(24d² + 4·t_in·d) + (1 + m)·t_lab(24d² + 4·t_lab·d)]
  + rounds · a_round · layers · Σ over the re-embedded texts of t(24d² + 4td)
with B the global batch, t_in and t_lab the longest input and label in a batch (a step pads to them), passes 3
(forward and backward; 4 with gradient caching, as the stage resolves train.grad_cache_chunk for MiniLM in fp32
on a CPU), rounds = ceil(max_steps / hnm_steps) plus the final
validation, each re-embedding the labels and every training input (mean lengths: those batches are sorted by
length). a_step and a_round come from FOLDOC's fine-tuned CPU run (300 steps of 32, 4 rounds: its training
curve); WordNet's and wordnet-hyper's runs (one round, 300 steps) check them. Lengths: scripts/token_lengths.py.

The GPU column projects the same shapes on one H100 from rates measured there (each names its record):
embed = (N + T + L) / the embed loop's texts/s; train = the preset's schedule (max_steps x the paper's
global batch) / the training step's examples/s; tune and evaluate = their exact search on the GPU,
2·d FLOPs per query and key: Q·(N + L) and T·(N + L) query-key pairs, at the FLOP/s of the largest search
the 1.3M chain's tune stage ran on an H200 (the H100 SXM's tensor cores, more memory bandwidth; 20,000 queries,
its first block's start included, so a lower bound for a long search). Only encoders measured on an H100 get
embed and train figures. On a
GPU the index stage builds no graph (exact search there), and evaluate's scoring stays on the CPU cores.

Peak memory = the stage's base (fitted on the 131K d = 64 run) + the arrays it must hold:
embed the model; index the larger key set's keys and graph; tune every key and Y_train; evaluate both graphs, the
test queries' embeddings and the label matrices. Disk: embeddings (N + T + L)·d·4, the two graphs by
raexmc.memory.hnsw's footprint, the model's float32 weights.

A memory of 100M keys on a Milvus cluster (docs/scale.md): its query nodes (64 GB, 70 % for the index) and RAM each,
from the HNSW index's bytes per key that bench/milvus_search.py measured (bench/results/milvus_lite.json).
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from transformers import BertConfig

from raexmc.memory.hnsw import hnsw_disk_bytes, hnsw_resident_bytes
from raexmc.settings import load_settings
from raexmc.training.graph_memory import resolve_grad_cache
from raexmc.training.settings import TrainSettings

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
PARAMS = Path(__file__).resolve().parents[1] / "params.yaml"
MB = 1e6


@dataclass(frozen=True)
class Shape:
    N: int
    T: int
    L: int
    labels_per_input: float
    tokens: float = 25.7          # mean tokens per text of the synthetic titles (input_max_len 32)
    val_max_queries: int = 20000

    @property
    def Q(self) -> int:
        return min(round(0.05 * self.N), self.val_max_queries)

    @property
    def texts(self) -> int:
        return self.N + self.T + self.L


@dataclass(frozen=True)
class Encoder:
    width: int
    layers: int
    vocab: int = 30522
    positions: int = 512

    @property
    def parameters(self) -> int:
        d = self.width
        return (self.vocab + self.positions + 2) * d + self.layers * (12 * d * d + 13 * d)


SHAPES = {"131K": Shape(294805, 134835, 131073, 2.29), "1.3M": Shape(2248619, 970237, 1305265, 22.2)}
ENCODERS = {"random 64x2": Encoder(64, 2), "random 384x1": Encoder(384, 1),
            "MiniLM-L6 (384)": Encoder(384, 6), "DistilBERT (768)": Encoder(768, 6),
            "BERT-base (768)": Encoder(768, 12)}
PROJECTED = ("random 64x2", "MiniLM-L6 (384)", "DistilBERT (768)", "BERT-base (768)")
M, EF_SEARCH, EF_CONSTRUCTION, B = 64, 300, 500, 200
# The measured runs: (record, shape, encoder, efC of its index).
RUNS = {
    "131K d=64": ("stage_resources_synthetic-LF-AmazonTitles-131K_tiny64-zero-shot-cpu.json", "131K",
                  "random 64x2", 500),
    "131K d=384": ("stage_resources_synthetic-LF-AmazonTitles-131K_tiny384x1-zero-shot.json", "131K",
                   "random 384x1", 500),
    "1.3M d=64": ("stage_resources_synthetic-LF-AmazonTitles-1.3M_tiny64-zero-shot-efc100.json", "1.3M",
                  "random 64x2", 100),
    "1.3M d=64, 2nd": ("stage_resources_synthetic-LF-AmazonTitles-1.3M_tiny64-zero-shot-efc100-full.json", "1.3M",
                       "random 64x2", 100),
    "1.3M d=64, fine-tuned": ("stage_resources_synthetic-LF-AmazonTitles-1.3M_tiny64-fine-tuned-efc100-full.json",
                              "1.3M", "random 64x2", 100),
    # the first run's setting again, on another of our 2-core machines (its note): checks only, fitted on nothing
    "131K d=64, other machine": ("stage_resources_synthetic-LF-AmazonTitles-131K_tiny64-zero-shot-full.json", "131K",
                                 "random 64x2", 500),
    "131K d=64, other machine, fine-tuned": (
        "stage_resources_synthetic-LF-AmazonTitles-131K_tiny64-fine-tuned-full.json", "131K", "random 64x2", 500),
}
EFC_RECORD = "stage_resources_synthetic-LF-AmazonTitles-131K_tiny64-efc100.json"  # the 131K index at efC=100
MODELLED = ("embed", "index", "tune", "evaluate")

# One H100's rates, each from its record (bench/results); means of the runs they list.
GPU = "NVIDIA H100 80GB HBM3"
GPU_EMBED_RECORD = "embed_speed.json"      # the embed loop, batch 1024, every text at 32 tokens
GPU_TRAIN_RECORD = "train_speed.json"      # the training step at the preset's 896 per GPU, bf16
GPU_ENCODER_MODELS = {"MiniLM-L6 (384)": "all-MiniLM-L6-v2", "DistilBERT (768)": "distilbert-sized"}
GPU_SEARCH_RECORD = "stage_resources_synthetic-LF-AmazonTitles-1.3M_minilm-fine-tuned-gpu.json"  # tune's searches
PRESET_SCHEDULES = {"131K": (3000, 7168), "1.3M": (40000, 7168)}  # max_steps, the paper's global batch


# The train stage's measured runs (MiniLM-L6, fp32, our 2 cores, no other job): (stage record, training curve).
TRAIN_FIT = ("stage_resources_foldoc_fine-tuned-auto-cpu.json", "runs/foldoc_fine-tuned-auto-cpu/training_curve.json")
TRAIN_CHECKS = {name: (f"stage_resources_{name}_fine-tuned-auto-cpu.json",
                       f"runs/{name}_fine-tuned-auto-cpu/training_curve.json") for name in ("wordnet", "wordnet-hyper")}
TOKEN_LENGTHS = "token_lengths.json"
MINILM_CONFIG = BertConfig(hidden_size=384, num_attention_heads=12, num_hidden_layers=6)
# The paper's shapes, with the synthetic titles' lengths (25.7 tokens on average, input_max_len 32) for inputs
# and labels: N from the XC Repository's published shapes.
LF_TRAIN_SHAPES = {"LF-AmazonTitles-131K": 294_805, "LF-WikiSeeAlso-320K": 693_082, "LF-Wikipedia-500K": 1_813_391,
                   "LF-AmazonTitles-1.3M": 2_248_619}
LF_LABELS = {"LF-AmazonTitles-131K": 131_073, "LF-WikiSeeAlso-320K": 312_330, "LF-Wikipedia-500K": 501_070,
             "LF-AmazonTitles-1.3M": 1_305_265}


def token_work(tokens: float, encoder: Encoder) -> float:
    """The matrix-product work of one text of `tokens` tokens through the encoder."""
    d = encoder.width
    return encoder.layers * tokens * (24 * d * d + 4 * tokens * d)


def batch_longest(lengths: dict, texts: int) -> float:
    """The longest text in a batch of `texts` (token_lengths.json's sizes: the nearest one not below, or the
    largest)."""
    sizes = sorted(int(size) for size in lengths["batch_longest"])
    return lengths["batch_longest"][str(next((size for size in sizes if size >= texts), sizes[-1]))]


def train_settings(mode: str, n_train: int, max_lengths: tuple[int, int] = (128, 32)) -> TrainSettings:
    """params.yaml's training recipe under `mode`, resolved as the train stage resolves it for n_train inputs and
    MiniLM on a CPU in fp32, texts cut at max_lengths (inputs, labels): the schedule, then gradient caching."""
    train = load_settings(PARAMS).train.model_copy(update={"schedule": mode})
    key = {"input_max_len": max_lengths[0], "label_max_len": max_lengths[1]}
    return resolve_grad_cache(TrainSettings.from_section(train, lambda: n_train), MINILM_CONFIG, "fp32", key, "cpu")


def train_work(data: dict, encoder: Encoder, settings: TrainSettings) -> tuple[float, float, int]:
    """(work of one step, work of one mining round, rounds) for a dataset row of token_lengths.json."""
    batch, m = settings.batch_size, settings.num_hard_negatives
    passes = 4 if settings.grad_cache_chunk else 3
    example = (token_work(batch_longest(data["train"], batch), encoder)
               + (1 + m) * token_work(batch_longest(data["labels"], (1 + m) * batch), encoder))
    step = passes * batch * example
    round_ = data["N"] * token_work(data["train"]["mean_tokens"], encoder) \
        + data["L"] * token_work(data["labels"]["mean_tokens"], encoder)
    rounds = math.ceil(settings.max_steps / settings.hnm_steps) + int(settings.validate_last)
    return step, round_, rounds


def measured_train(names: tuple[str, str], steps: int) -> dict[str, float]:
    """Seconds a step and a round took in a measured run: the first round is the curve's first point; the
    steps share the rest of the stage's wall time with the other rounds."""
    record, curve = (json.loads((RESULTS / name).read_text()) for name in names)
    round_s = curve[0]["elapsed_s"]
    return {"round_s": round_s, "step_s": (record["train"]["wall_s"] - len(curve) * round_s) / steps}


def fit_train(lengths: dict, encoder: Encoder) -> dict[str, float]:
    settings = train_settings("fixed", lengths["foldoc"]["N"])
    step, round_, _ = train_work(lengths["foldoc"], encoder, settings)
    measured = measured_train(TRAIN_FIT, settings.max_steps)
    return {"a_step": measured["step_s"] / step, "a_round": measured["round_s"] / round_}


def predict_train(data: dict, encoder: Encoder, settings: TrainSettings, constants: dict) -> dict:
    step, round_, rounds = train_work(data, encoder, settings)
    steps_s, rounds_s = settings.max_steps * step * constants["a_step"], rounds * round_ * constants["a_round"]
    return {"batch": settings.batch_size, "lr": settings.lr, "max_steps": settings.max_steps,
            "hnm_steps": settings.hnm_steps, "grad_cache_chunk": settings.grad_cache_chunk, "rounds": rounds,
            "step_s": round(step * constants["a_step"], 2),
            "round_s": round(round_ * constants["a_round"], 1), "wall_h": round((steps_s + rounds_s) / 3600, 2)}


def train_checks(lengths: dict, encoder: Encoder, constants: dict) -> list[dict]:
    """The WordNet runs (300 steps of 32, one round at step 0, no final validation) beside the model."""
    rows = []
    for name, files in TRAIN_CHECKS.items():
        settings = replace(train_settings("fixed", lengths[name]["N"]), hnm_steps=300, validate_last=False)
        model = predict_train(lengths[name], encoder, settings, constants)
        measured = measured_train(files, settings.max_steps)
        rows.append({"dataset": name, "step_s": round(measured["step_s"], 2), "model_step_s": model["step_s"],
                     "round_s": round(measured["round_s"], 1), "model_round_s": model["round_s"]})
    return rows


def train_projections(lengths: dict, encoder: Encoder, constants: dict) -> list[dict]:
    """Both schedules on our datasets and the paper's shapes (titles), fine-tuned MiniLM on our 2 fp32 cores."""
    titles = {"mean_tokens": 25.7, "batch_longest": {"32": 32.0}}
    shapes = {**lengths, **{name: {"N": n, "L": LF_LABELS[name], "train": titles, "labels": titles}
                            for name, n in LF_TRAIN_SHAPES.items()}}
    return [{"dataset": name, "N": data["N"], "schedule": mode,
             **predict_train(data, encoder, train_settings(mode, data["N"], (32, 32) if name in LF_TRAIN_SHAPES
                                                           else (128, 32)), constants)}
            for name, data in shapes.items() for mode in ("fixed", "auto")]


def features(stage: str, shape: Shape, encoder: Encoder) -> tuple[float, float]:
    """What the stage's two constants multiply: the work that grows with the width (a) and the rest (c)."""
    d = encoder.width
    if stage == "embed":   # FLOPs of the matrix products; the per-token, per-layer element-wise work
        per_token = shape.texts * shape.tokens * encoder.layers
        return per_token * (24 * d * d + 4 * shape.tokens * d), per_token * d
    if stage == "index":   # HNSW inserts: n·ln(n)·efC distance evaluations per key set
        steps = sum(n * math.log(n) for n in (shape.N, shape.L)) * EF_CONSTRUCTION
    elif stage == "tune":  # the exact validation search
        steps = shape.Q * (shape.N + shape.L)
    elif stage == "evaluate":  # two HNSW searches per test query; scoring its b keys' labels in every ranking
        return (shape.T * EF_SEARCH * (math.log(shape.N) + math.log(shape.L)) * d,
                shape.T * B * (1 + shape.labels_per_input))
    else:
        raise KeyError(stage)
    return steps * d, steps


def arrays_bytes(stage: str, shape: Shape, encoder: Encoder) -> float:
    """The arrays the stage cannot avoid holding, in bytes."""
    d = encoder.width
    if stage == "embed":
        return encoder.parameters * 4
    if stage == "index":
        biggest = max(shape.N, shape.L)
        return biggest * d * 4 + hnsw_resident_bytes(biggest, d, M)
    if stage == "tune":   # every key, and the training label matrix (CSR: int32 index + float64 value)
        return (shape.N + shape.L) * d * 4 + shape.N * shape.labels_per_input * 12
    if stage == "evaluate":
        labels = (shape.N + shape.T) * shape.labels_per_input * 12   # CSR: int32 index + float64 value
        return hnsw_resident_bytes(shape.N, d, M) + hnsw_resident_bytes(shape.L, d, M) + shape.T * d * 4 + labels
    raise KeyError(stage)


def disk_bytes(stage: str, shape: Shape, encoder: Encoder) -> float:
    d = encoder.width
    if stage == "embed":
        return shape.texts * d * 4
    if stage == "index":
        return hnsw_disk_bytes(shape.N, d, M) + hnsw_disk_bytes(shape.L, d, M)
    if stage == "train":
        return encoder.parameters * 4
    raise KeyError(stage)


def load_run(name: str) -> dict:
    record, shape, encoder, efc = RUNS[name]
    return {"record": record, "shape": shape, "encoder": encoder, "efC": efc,
            "stages": json.loads((RESULTS / record).read_text())}


def fit(runs: dict[str, dict], efc_ratio: float) -> dict[str, dict[str, float]]:
    """Per modelled stage: a and c from the two 131K runs, a alone from the d = 64 run, and each
    stage's base memory from the d = 64 run."""
    constants = {}
    small, wide = runs["131K d=64"], runs["131K d=384"]
    for stage in MODELLED:
        rows = [features(stage, SHAPES[run["shape"]], ENCODERS[run["encoder"]]) for run in (small, wide)]
        a, c = np.linalg.solve(np.array(rows), np.array([run["stages"][stage]["cpu_s"] for run in (small, wide)]))
        shape, encoder = SHAPES[small["shape"]], ENCODERS[small["encoder"]]
        a_only = small["stages"][stage]["cpu_s"] / features(stage, shape, encoder)[0]
        base = small["stages"][stage]["peak_rss_mb"] * MB - arrays_bytes(stage, shape, encoder)
        constants[stage] = {"a": float(a), "c": float(c), "a_only": float(a_only), "base_bytes": float(base)}
    constants["index"]["efc100_ratio"] = efc_ratio
    constants["index"]["growth"] = index_growth(runs, constants)
    return constants


def index_growth(runs: dict[str, dict], constants: dict) -> float:
    """γ of the index's factor (N / N_131K)^γ: the median 1.3M build over what N·ln(N) fitted at 131K predicts
    for it, as a power of the inputs' growth. Measured, not derived: the graph's random walks miss the caches
    more as it grows."""
    big = [run for run in runs.values() if run["shape"] == "1.3M" and "index" in run["stages"]]
    n_log_n = {**constants, "index": {**constants["index"], "growth": 0.0}}  # the prediction without the factor
    ratios = [run["stages"]["index"]["cpu_s"]
              / (predict("index", SHAPES["1.3M"], ENCODERS[run["encoder"]], n_log_n)["cpu_s"]
                 * (constants["index"]["efc100_ratio"] if run["efC"] == 100 else 1.0))
              for run in big]
    return math.log(statistics.median(ratios)) / math.log(SHAPES["1.3M"].N / SHAPES["131K"].N) if ratios else 0.0


def predict(stage: str, shape: Shape, encoder: Encoder, constants: dict, one_constant: bool = False) -> dict:
    k = constants[stage]
    grows, rest = features(stage, shape, encoder)
    cpu = grows * k["a_only"] if one_constant else grows * k["a"] + rest * k["c"]
    cpu *= (shape.N / SHAPES["131K"].N) ** k.get("growth", 0.0)
    peak = k["base_bytes"] + arrays_bytes(stage, shape, encoder)
    disk = disk_bytes(stage, shape, encoder) if stage in ("embed", "index") else None
    return {"cpu_s": cpu, "peak_rss_mb": peak / MB, "output_mb": None if disk is None else disk / MB}


def checks(runs: dict[str, dict], constants: dict) -> list[dict]:
    """Each measured run beside what the model predicts for it (the 1.3M index at its own efC)."""
    rows = []
    for name, run in runs.items():
        shape, encoder = SHAPES[run["shape"]], ENCODERS[run["encoder"]]
        for stage in MODELLED:
            measured = run["stages"].get(stage)
            if measured is None or "cpu_s" not in measured:
                continue
            model = predict(stage, shape, encoder, constants)
            one = predict(stage, shape, encoder, constants, one_constant=True)
            scale = constants["index"]["efc100_ratio"] if stage == "index" and run["efC"] == 100 else 1.0
            rows.append({"run": name, "stage": stage, "cpu_s": measured["cpu_s"],
                         "model_cpu_s": round(model["cpu_s"] * scale, 1),
                         "one_constant_cpu_s": round(one["cpu_s"] * scale, 1),
                         "peak_rss_mb": measured["peak_rss_mb"], "model_peak_rss_mb": round(model["peak_rss_mb"]),
                         "output_mb": round(measured["output_bytes"] / MB, 1),
                         "model_output_mb": None if model["output_mb"] is None else round(model["output_mb"], 1)})
    return rows


def projections(constants: dict, rates: dict) -> list[dict]:
    """Per shape, encoder and stage: the CPU model's hours, peak and output on our 2 cores beside one H100's hours."""
    rows = []
    for shape_name, shape in SHAPES.items():
        for encoder_name in PROJECTED:
            encoder = ENCODERS[encoder_name]
            for stage in ("train (preset)", *MODELLED, "train (model)"):
                row = {"shape": shape_name, "encoder": encoder_name, "stage": stage, "cpu_h": None, "peak_rss_gb": None,
                       "output_gb": None}
                if stage in MODELLED:
                    model = predict(stage, shape, encoder, constants)
                    row.update(cpu_h=round(model["cpu_s"] / 3600, 2), peak_rss_gb=round(model["peak_rss_mb"] / 1e3, 2),
                               output_gb=None if model["output_mb"] is None else round(model["output_mb"] / 1e3, 2))
                elif stage == "train (model)":
                    row["output_gb"] = round(disk_bytes("train", shape, encoder) / 1e9, 2)
                seconds = gpu_seconds(stage, shape_name, encoder_name, rates)
                row.update(gpu_s=None if seconds is None else round(seconds, 3), gpu_source=GPU_SOURCES[stage])
                rows.append(row)
    return rows


def mean_rate(record: str, key: str, model: str, batch: int) -> float | None:
    """The mean of `key` over the record's H100 rows of `model` at batch `batch` (None: no such row)."""
    rows = [row[key] for row in json.loads((RESULTS / record).read_text())
            if row.get("device") == GPU and row.get("model") == model
            and row.get("batch_per_device", row.get("batch_size")) == batch and not row.get("grad_cache_chunk")]
    return statistics.mean(rows) if rows else None


def gpu_search_rate() -> dict:
    """FLOP/s of the GPU's exact search: 2·d per query and key, over the largest search in its record."""
    record = json.loads((RESULTS / GPU_SEARCH_RECORD).read_text())
    search = max((row for row in record["tune_stopped"]["searches_done"] if "keys" in row), key=lambda row: row["keys"])
    return {"value": 2 * search["dim"] * search["keys"] * search["queries_per_s"], "device": record["card"],
            "search": search, "record": GPU_SEARCH_RECORD}


def gpu_rates() -> dict:
    """Each rate the GPU projection uses, with its record."""
    embed = {name: mean_rate(GPU_EMBED_RECORD, "texts_per_s", model, 1024)
             for name, model in GPU_ENCODER_MODELS.items()}
    train = {name: mean_rate(GPU_TRAIN_RECORD, "examples_per_s", model, 896)
             for name, model in GPU_ENCODER_MODELS.items()}
    return {"device": GPU,
            "embed_texts_per_s": {"values": {k: v for k, v in embed.items() if v}, "record": GPU_EMBED_RECORD},
            "train_examples_per_s": {"values": {k: v for k, v in train.items() if v}, "record": GPU_TRAIN_RECORD},
            "search_flops_per_s": gpu_search_rate()}


def gpu_seconds(stage: str, shape_label: str, encoder_name: str, rates: dict) -> float | None:
    """One H100's wall seconds for a stage's GPU work (None: no rate measured for this encoder, or no GPU work)."""
    shape, width = SHAPES[shape_label], ENCODERS[encoder_name].width
    if stage == "embed":
        rate = rates["embed_texts_per_s"]["values"].get(encoder_name)
        return None if rate is None else shape.texts / rate
    if stage == "train (preset)":
        rate = rates["train_examples_per_s"]["values"].get(encoder_name)
        steps, batch = PRESET_SCHEDULES[shape_label]
        return None if rate is None else steps * batch / rate
    if stage in ("tune", "evaluate"):
        queries = shape.Q if stage == "tune" else shape.T
        return queries * (shape.N + shape.L) * 2 * width / rates["search_flops_per_s"]["value"]
    return None


def duration(seconds: float) -> str:
    """Seconds as a table reads them: s below two minutes, min below two hours, then h."""
    if seconds < 120:
        return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:,.0f} s"
    return f"{seconds / 60:,.1f} min" if seconds < 7200 else f"{seconds / 3600:,.1f} h"


GPU_SOURCES = {"embed": GPU_EMBED_RECORD, "train (preset)": GPU_TRAIN_RECORD, "index": "", "train (model)": "",
               "tune": f"search: {GPU_SEARCH_RECORD} (H200)", "evaluate": f"search: {GPU_SEARCH_RECORD} (H200)"}


def markdown(check_rows: list[dict], projection_rows: list[dict]) -> str:
    lines = ["| run | stage | CPU s measured | model | d-linear | peak MB measured | model | output MB | model |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in check_rows:
        modelled_mb = "" if r["model_output_mb"] is None else f"{r['model_output_mb']:,.1f}"
        lines.append(f"| {r['run']} | {r['stage']} | {r['cpu_s']:,.0f} | {r['model_cpu_s']:,.0f} | "
                     f"{r['one_constant_cpu_s']:,.0f} | {r['peak_rss_mb']:,.0f} | {r['model_peak_rss_mb']:,} | "
                     f"{r['output_mb']:,.1f} | {modelled_mb} |")
    lines += ["", "| shape | encoder | stage | CPU hours (2 cores) | peak GB | output GB | one H100 | H100 rate from |",
              "|---|---|---|---|---|---|---|---|"]
    for r in projection_rows:
        cells = ["" if r[k] is None else f"{r[k]:,.2f}" for k in ("cpu_h", "peak_rss_gb", "output_gb")]
        gpu = ("", "") if r["gpu_s"] is None else (duration(r["gpu_s"]), r["gpu_source"])
        lines.append(f"| {r['shape']} | {r['encoder']} | {r['stage']} | " + " | ".join((*cells, *gpu)) + " |")
    return "\n".join(lines)


def train_markdown(train: dict) -> str:
    lines = ["| dataset | step s measured | model | round s measured | model |", "|---|---|---|---|---|"]
    lines += [f"| {r['dataset']} | {r['step_s']} | {r['model_step_s']} | {r['round_s']} | {r['model_round_s']} |"
              for r in train["checks"]]
    lines += ["", "| dataset | N | schedule | batch | lr | steps | mining every | grad cache | rounds | s a step "
              "| s a round | hours |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['dataset']} | {r['N']:,} | {r['schedule']} | {r['batch']} | {r['lr']:.3g} | {r['max_steps']:,} | "
              f"{r['hnm_steps']:,} | {r['grad_cache_chunk']} | {r['rounds']} | {r['step_s']} | {r['round_s']:,} | "
              f"{r['wall_h']:,} |"
              for r in train["projections"]]
    return "\n".join(lines)


MILVUS_RECORD = "milvus_lite.json"  # Milvus Lite's HNSW index (faiss) at the paper's M, measured on FOLDOC
CLUSTER_KEYS, NODE_GB, NODE_USABLE = 100_000_000, 64, 0.7  # query nodes of 64 GB, 30 % left to Milvus itself


def milvus_cluster() -> dict:
    """Query nodes and RAM each for a 100M-key Milvus memory at each encoder width: a key costs its float32 vector
    plus the HNSW graph's bytes per key, measured (the index file's bytes per key less the vector's, at M = 64)."""
    measured = json.loads((RESULTS / MILVUS_RECORD).read_text())
    graph = measured["HNSW"]["index_bytes_per_key"] - 4 * measured["dim"]
    rows = []
    for width in sorted({encoder.width for encoder in ENCODERS.values()}):
        total_gb = CLUSTER_KEYS * (4 * width + graph) / 1e9
        nodes = math.ceil(total_gb / (NODE_GB * NODE_USABLE))
        rows.append({"keys": CLUSTER_KEYS, "dim": width, "index_gb": round(total_gb, 1), "nodes": nodes,
                     "ram_per_node_gb": round(total_gb / nodes, 1)})
    return {"graph_bytes_per_key": round(graph, 1), "node_gb": NODE_GB, "usable": NODE_USABLE,
            "record": MILVUS_RECORD, "rows": rows}


def main() -> None:
    runs = {name: load_run(name) for name in RUNS if (RESULTS / RUNS[name][0]).exists()}
    efc = json.loads((RESULTS / EFC_RECORD).read_text())["index"]["cpu_s"]
    efc_ratio = efc / runs["131K d=64"]["stages"]["index"]["cpu_s"]
    constants = fit(runs, efc_ratio)
    rates = gpu_rates()
    check_rows, projection_rows = checks(runs, constants), projections(constants, rates)
    lengths = json.loads((RESULTS / TOKEN_LENGTHS).read_text())["datasets"]
    minilm = ENCODERS["MiniLM-L6 (384)"]
    constants["train"] = fit_train(lengths, minilm)
    train = {"fit": TRAIN_FIT, "token_lengths": TOKEN_LENGTHS,
             "checks": train_checks(lengths, minilm, constants["train"]),
             "projections": train_projections(lengths, minilm, constants["train"])}
    out = RESULTS / "cost_model.json"
    out.write_text(json.dumps({"constants": constants, "checks": check_rows, "projections": projection_rows,
                               "gpu_rates": rates, "train": train, "milvus_cluster": milvus_cluster(),
                               "runs": {name: run["record"] for name, run in runs.items()},
                               "command": "python scripts/cost_model.py"}, indent=2) + "\n")
    print(markdown(check_rows, projection_rows))
    print("\n" + train_markdown(train))
    print("\n| keys | dim | HNSW index GB | query nodes (64 GB) | RAM per node GB |\n|---|---|---|---|---|")
    for row in milvus_cluster()["rows"]:
        print(f"| {row['keys']:,} | {row['dim']} | {row['index_gb']:,} | {row['nodes']} | {row['ram_per_node_gb']} |")


if __name__ == "__main__":
    main()
