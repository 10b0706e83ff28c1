"""embed.precision int8 (raexmc.encoder.int8): MiniLM's int8 vectors stay near its fp32 ones, a text's vector does
not depend on the texts batched with it (int8 on a GPU is refused: test_embedding.py)."""

from __future__ import annotations

import sys

import numpy as np
import onnx
import pytest

from raexmc.encoder.int8 import Int8Encoder, quantized_bytes
from raexmc.encoder.text_encoder import TextEncoder, batch_tensors
from tests.helpers import run_on_small_disk

# FOLDOC-like inputs of a few to some fifty tokens (a title, or a title and the first words of its definition)
TEXTS = ["perl", "unix operating system", "jython python on the jvm",
         "compiler a program that translates a high-level language into machine code",
         "garbage collection the process by which dynamically allocated storage is reclaimed during the execution "
         "of a program, usually when no pointer to it remains",
         "hash table a data structure that maps keys to values by computing an index into an array of buckets",
         "TCP transmission control protocol, the connection-oriented transport of the internet protocol suite",
         "lambda calculus a formal system for expressing computation by function abstraction and application"]

# The bound: on 256 FOLDOC test inputs at 128 tokens, MiniLM's int8 vectors (per-channel 7-bit weights) had
# cosine 0.982 at least and 0.993 on average with its fp32 ones (0.986 and 0.993 at 32 tokens;
# bench/results/cpu_encoder_speed_loaded.json); 0.97 leaves room for other CPUs' rounding.
MIN_COSINE = 0.97


@pytest.fixture(scope="module")
def minilm() -> dict[str, TextEncoder]:
    return {precision: TextEncoder.load("all-MiniLM-L6-v2", "cpu", precision, max_len=128)
            for precision in ("fp32", "int8")}


def test_int8_vectors_are_unit_vectors_near_fp32s(minilm):
    int8, fp32 = (minilm[precision].embed_texts(TEXTS) for precision in ("int8", "fp32"))
    assert int8.dtype == np.float32 and int8.shape == fp32.shape
    np.testing.assert_allclose(np.linalg.norm(int8, axis=1), 1.0, rtol=0, atol=1e-5)
    cosines = np.sum(int8 * fp32, axis=1)
    assert cosines.min() >= MIN_COSINE, cosines
    assert cosines.max() < 0.99999, "int8 gave fp32's vectors: the quantised model did not run"


def test_a_texts_int8_vector_is_the_same_alone_and_in_a_batch_and_at_any_thread_count(minilm):
    """Dynamic quantisation scales a call's activations together: encoded one text per call, the embed stage's
    batches and predict's single queries give each text the same vector, to the bit (texts of equal length
    batched in one call differed by up to 0.04 in a coordinate on FOLDOC titles). Each text runs on one thread
    however many run at once: one thread and three give the same bits."""
    batched = minilm["int8"].embed_texts(TEXTS)
    alone = np.concatenate([minilm["int8"].embed_texts([text]) for text in reversed(TEXTS)])[::-1]
    np.testing.assert_array_equal(batched, alone)
    quantized = quantized_bytes(minilm["fp32"].model)
    ids, lengths = minilm["fp32"].tokenize(TEXTS * 2)
    tensors = batch_tensors(ids, lengths, np.arange(len(lengths)), "cpu")
    one, three = (Int8Encoder(quantized, threads)(*tensors) for threads in (1, 3))
    np.testing.assert_array_equal(one, three)
    np.testing.assert_array_equal(one[:len(TEXTS)], one[len(TEXTS):])


# AVX2's u8 x s8 product (vpmaddubsw) adds two products of an activation in 0..255 and a weight into a signed 16-bit
# sum: it cannot saturate while 2 * 255 * |weight| <= 32767, so for every weight of magnitude 64 or less.
LARGEST_SAFE_WEIGHT = 32767 // (2 * 255)


def test_the_int8_weights_cannot_saturate_a_cpu_without_vnni(tiny_model):
    """Weights on 7 bits (reduce_range): with 8 (up to 127) AVX2's pair sums can saturate, whatever CPU runs this."""
    quantized = onnx.load_from_string(quantized_bytes(TextEncoder.load(str(tiny_model), "cpu", "fp32", 16).model))
    weights = [onnx.numpy_helper.to_array(tensor) for tensor in quantized.graph.initializer
               if tensor.data_type == onnx.TensorProto.INT8]
    assert len(weights) >= 12, "the 2 layers' 6 linear layers each hold int8 weights"
    assert max(int(np.abs(w.astype(np.int16)).max()) for w in weights) == LARGEST_SAFE_WEIGHT


def test_a_full_tmpdir_while_exporting_is_one_line_naming_the_file(tiny_model, tmp_path):
    """Issue 60, cause 3: torch.onnx.export's write names no file, so the line said "(file not reported)"."""
    small = tmp_path / "small"
    load = ("import sys, typer\nfrom raexmc.encoder.text_encoder import TextEncoder\n"
            "from raexmc.pipeline.tracking.stage import user_errors\ntry:\n    with user_errors():\n"
            f"        TextEncoder.load({str(tiny_model)!r}, 'cpu', 'int8', 16)\n"
            "except typer.Exit as done:\n    sys.exit(done.exit_code)")
    done = run_on_small_disk(small, 1 << 20, ["env", f"TMPDIR={small}", sys.executable, "-c", load], tmp_path)
    assert done.proc.returncode == 2 and "Traceback" not in done.proc.stderr, done.proc.stderr
    line = done.proc.stderr.strip().splitlines()[-1]
    assert line.startswith(f"StorageError: {small}/raexmc-int8-") and "/fp32.onnx: " + done.error in line, line
