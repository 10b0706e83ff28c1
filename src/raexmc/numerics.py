"""One set of CPU kernels for every stage, so that a run's floats do not depend on the CPU it ran on.

Three libraries pick their kernels by the CPU's widest instructions, and each choice rounds differently:
PyTorch's vector kernels (layer norm, GELU, softmax), MKL (the BLAS of PyTorch's CPU build: the encoder's
and exact search's matrix products, which on some paths it also splits by the thread count) and NumPy's
(exp and log in float64: the softmax over retrieved keys, label propensities). So the same encoder gave other
embeddings and scores on an AVX2 CPU than on an AVX-512 one, and the lock made on one did not hold on the
other. Pinning all three to their AVX2 level, MKL in its strict conditional-reproducibility mode, gives the
same bits on any Intel x86-64 CPU with AVX2 (every AVX-512 CPU has it) at any thread count;
docs/reproducibility.md says what it costs and where it cannot reach (MKL keeps its own dispatch on AMD).
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

# PyTorch reads its level at its first dispatched operation, MKL its branch at its first call, NumPy its
# disabled targets when it is imported (the AVX-512 ones, named as NumPy 2.4 and older releases name them).
PINNED_KERNELS = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "AVX2,STRICT",  # STRICT: the same results at any thread count
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR AVX512F AVX512_SKX AVX512_CLX AVX512_CNL",
}


def cpu_has_avx2(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this is an x86-64 CPU with AVX2, read from the kernel's CPU flags (without importing the
    libraries whose kernels are being pinned); False where there is no /proc/cpuinfo to read."""
    if platform.machine().lower() not in ("x86_64", "amd64") or not cpuinfo.is_file():
        return False
    flags = next((line for line in cpuinfo.read_text().splitlines() if line.startswith("flags")), "")
    return "avx2" in flags.split()


def pin_cpu_kernels() -> bool:
    """Set PINNED_KERNELS in this process's environment, and so its children's (torchrun ranks). Call it before
    NumPy and PyTorch are imported (a stage script's first statement); returns whether it came in time to pin
    this process too. A CPU without AVX2 keeps its own kernels: there is no common level to pin it to."""
    if not cpu_has_avx2():
        return False
    os.environ.update(PINNED_KERNELS)
    return "numpy" not in sys.modules and "torch" not in sys.modules


def kernels_pinned() -> bool:
    """Whether this process runs on the pinned kernels (or on a CPU that has none to pin to)."""
    return not cpu_has_avx2() or all(os.environ.get(name) == value for name, value in PINNED_KERNELS.items())
