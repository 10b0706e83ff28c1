"""raexmc.numerics.kernels_pinned: a process runs on the pinned kernels only when all four libraries' settings hold
their pinned values; one set alone leaves the other libraries on the CPU's own kernels."""

from __future__ import annotations

import pytest

from raexmc.numerics import PINNED_KERNELS, cpu_has_avx2, kernels_pinned

# PyTorch's level, MKL's branch and its instruction cap, NumPy's disabled targets (the module docstring's four)
PINNED = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "NPY_DISABLE_CPU_FEATURES")


@pytest.mark.skipif(not cpu_has_avx2(), reason="without AVX2 there is nothing to pin: every process counts as pinned")
@pytest.mark.parametrize("missing", PINNED)
def test_the_kernels_are_pinned_only_when_all_four_settings_are(monkeypatch, missing):
    assert sorted(PINNED_KERNELS) == sorted(PINNED)
    for name, value in PINNED_KERNELS.items():
        monkeypatch.setenv(name, value)
    assert kernels_pinned()
    monkeypatch.delenv(missing)
    assert not kernels_pinned(), f"{missing} unset"
    for name in PINNED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(missing, PINNED_KERNELS[missing])
    assert not kernels_pinned(), f"{missing} alone"
