"""The encoder in int8 on a CPU: the fp32 SentenceEncoder exported to ONNX, its linear layers' weights quantised
per output channel, run by ONNX Runtime. PyTorch's dynamic quantisation gave 0.92-1.14x fp32's speed on 2 AVX2 cores
(bench/results/cpu_encoder_speed.json); a scale per channel keeps MiniLM's vectors at cosine 0.99 with fp32's (per
tensor: 0.95); 7-bit weights (`reduce_range`) cannot overflow a CPU's 16-bit pair sums without VNNI. The model is
exported whenever an encoder loads at int8 (about 3 s for MiniLM), so a model folder carries only the fp32 weights."""

from __future__ import annotations

import contextlib
import logging
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from .sentence import SentenceEncoder

INPUTS = ("input_ids", "attention_mask")
OPSET = 17


def export_onnx(model: SentenceEncoder, path: Path) -> None:
    """The encoder's fp32 graph, token ids and mask to unit vectors, batch and width left free."""
    ids = torch.ones((2, 8), dtype=torch.int64)
    free = {name: {0: "batch", 1: "tokens"} for name in INPUTS}
    with warnings.catch_warnings():  # the tracer's notes on Python control flow: the graph is checked by tests
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), (ids, torch.ones_like(ids)), str(path), dynamo=False, opset_version=OPSET,
                          input_names=list(INPUTS), output_names=["vectors"],
                          dynamic_axes={**free, "vectors": {0: "batch"}})


def quantized_bytes(model: SentenceEncoder) -> bytes:
    """The ONNX model of `model` with its linear layers' weights in int8 (per channel, 7 bits)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory(prefix="raexmc-int8-") as scratch:
        fp32, int8 = Path(scratch) / "fp32.onnx", Path(scratch) / "int8.onnx"
        with _writing(fp32):
            export_onnx(model, fp32)
        root = logging.getLogger()  # quantize_dynamic advises on it (pre-processing we do not need): errors only
        level = root.level
        root.setLevel(logging.ERROR)
        try:
            with _writing(int8):
                quantize_dynamic(fp32, int8, per_channel=True, reduce_range=True, weight_type=QuantType.QInt8)
        finally:
            root.setLevel(level)
        return int8.read_bytes()


@contextlib.contextmanager
def _writing(path: Path):
    """An OSError naming no file (torch.onnx.export's and onnx's writes) names `path`: a full TMPDIR says where."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from None


class Int8Encoder:
    """Unit vectors (float32) of right-padded token ids and masks from the `quantized` ONNX model, on `threads`
    CPU threads (default: torch's setting).

    One text per call, cut to its length: dynamic quantisation scales a call's activations by their largest, so in
    a batch a vector would depend on its neighbours (up to 0.04 a coordinate). Each call runs on one thread and
    `threads` texts at once: ONNX Runtime's threads synchronise at every operator, which cost up to 2.4x on 2 busy
    cores (bench/results/cpu_encoder_speed_loaded.json), and a vector is the same alone or in a batch."""

    def __init__(self, quantized: bytes, threads: int | None = None):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        options.log_severity_level = 3  # errors only: its notes on unused initialisers are not the user's
        self.session = onnxruntime.InferenceSession(quantized, options, providers=["CPUExecutionProvider"])
        self.threads = threads or torch.get_num_threads()
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="raexmc-int8") if self.threads > 1 else None

    def _one(self, ids: np.ndarray) -> np.ndarray:
        return self.session.run(None, {"input_ids": ids[None], "attention_mask": np.ones((1, len(ids)), np.int64)})[0]

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> np.ndarray:
        ids, lengths = input_ids.cpu().numpy(), attention_mask.sum(dim=1).cpu().numpy()
        texts = [ids[row, :length] for row, length in enumerate(lengths)]
        return np.concatenate(list(map(self._one, texts) if self._pool is None else self._pool.map(self._one, texts)))
