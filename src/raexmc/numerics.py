"""One set of CPU kernels for every stage, so a run's floats do not depend on its CPU: PyTorch, MKL and NumPy pick
kernels by the CPU's widest instructions, each rounding otherwise (a lock made on an AVX-512 CPU did not hold on an
AVX2 one). Pinned to AVX2, MKL in strict mode, they give the same bits on any Intel x86-64 CPU with AVX2 at any thread
count (docs/reproducibility.md: the cost, and AMD, where MKL keeps its own dispatch)."""

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
    """Whether this is an x86-64 CPU with AVX2, from the kernel's CPU flags (importing none of the pinned libraries)."""
    if platform.machine().lower() not in ("x86_64", "amd64") or not cpuinfo.is_file():
        return False
    flags = next((line for line in cpuinfo.read_text().splitlines() if line.startswith("flags")), "")
    return "avx2" in flags.split()


def pin_cpu_kernels() -> bool:
    """Set PINNED_KERNELS here and for child processes (no AVX2: none); whether it came before NumPy and PyTorch."""
    if not cpu_has_avx2():
        return False
    os.environ.update(PINNED_KERNELS)
    return "numpy" not in sys.modules and "torch" not in sys.modules


def kernels_pinned() -> bool:
    """Whether this process runs on the pinned kernels (or on a CPU that has none to pin to)."""
    return not cpu_has_avx2() or all(os.environ.get(name) == value for name, value in PINNED_KERNELS.items())
