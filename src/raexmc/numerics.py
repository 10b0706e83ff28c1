"""One set of CPU kernels for every stage, so that a run's floats do not depend on the CPU it ran on.

PyTorch picks its vector kernels (layer norm, GELU, softmax, reductions) by the CPU's widest instructions, and
MKL (the BLAS of PyTorch's CPU build: the encoder's and exact search's matrix products) picks its own and, on
some paths, splits a product by the thread count. Each choice rounds differently, so the same encoder gave
other embeddings on an AVX2 CPU than on an AVX-512 one, and the lock made on one did not hold on the other.
Pinning both to their AVX2 level, MKL in its strict conditional-reproducibility mode, gives the same bits on
any x86-64 CPU with AVX2 (every AVX-512 CPU has it) and at any thread count; docs/reproducibility.md says
what it costs in speed.
"""

from __future__ import annotations

import os

# What the pins set: PyTorch's kernel level (read at its first dispatched operation) and MKL's code path and
# reproducibility mode (read at its first call). STRICT makes MKL's results independent of the thread count.
PINNED_KERNELS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}


def pin_cpu_kernels() -> dict[str, str]:
    """Set PINNED_KERNELS in this process's environment (and so its children's: torchrun ranks), before any
    tensor operation runs; returns what was set. A CPU without AVX2 keeps its own kernels (nothing to pin to:
    its floats differ from those of newer CPUs, as docs/reproducibility.md says)."""
    import torch

    if not torch.cpu._is_avx2_supported():
        return {}
    os.environ.update(PINNED_KERNELS)
    if torch.backends.cpu.get_cpu_capability() != "AVX2":  # chosen once, by an operation that ran before this
        raise RuntimeError("pin_cpu_kernels() ran after a tensor operation: call it before any")
    return dict(PINNED_KERNELS)
