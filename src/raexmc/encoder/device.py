"""Choosing the device, mixed precision and embedding batch size the hardware supports."""

from __future__ import annotations

import contextlib
import os
import re
import sys

from ..errors import ConfigError
from ..settings import DEVICE_PATTERN

# texts per gradient-free encoder call for `auto`: on one H200, 1024 gave 2.4x the texts/s of 256 on 8-32-token
# texts (bench/results/embed_speed.json), as fewer, larger calls keep the GPU busy; a CPU gains nothing from it
AUTO_EMBED_BATCH = {"cuda": 1024, "cpu": 256}
# What a GPU driver leaves on Linux (NVIDIA's, also in containers; ROCm's; WSL2's bridge): where none is, torch.cuda
# cannot see a GPU, so a stage that only asks need not import torch (1.5-2.5 s of a small pipeline's stages).
GPU_DRIVER_FILES = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/kfd", "/dev/dxg")


def gpu_visible() -> bool:
    """torch.cuda.is_available(), importing torch only where a GPU driver is present."""
    if sys.platform == "linux" and not any(os.path.exists(path) for path in GPU_DRIVER_FILES):
        return False
    import torch

    return torch.cuda.is_available()


def pick_device(requested: str = "auto", path: str | os.PathLike | None = None, key: str | None = None) -> str:
    """The torch device for `requested` (auto: a visible GPU), or ConfigError naming `path` and `key`."""
    if not isinstance(requested, str) or not re.fullmatch(DEVICE_PATTERN, requested):
        raise ConfigError(f"device must be auto, cpu, cuda or cuda:N, got {requested!r}", path, key)
    if requested == "auto":
        return "cuda" if gpu_visible() else "cpu"
    if requested.startswith("cuda") and not gpu_visible():
        raise ConfigError(f"device '{requested}' requested but no GPU is visible", path, key)
    return requested


def resolve_precision(precision: str, device: str, path: str | os.PathLike | None = None,
                      key: str | None = None) -> str:
    """'auto' -> bf16 where the hardware runs it natively, else fp32 (fp16 on a GPU); int8 on a GPU is refused."""
    if precision == "int8" and device != "cpu":
        raise ConfigError(f"precision 'int8' runs on the CPU only, the device is {device}: set the device to cpu",
                          path, key)
    if precision != "auto":
        return precision
    import torch

    if device.startswith("cuda"):
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    # AVX512-BF16 or AMX: bf16 matrix work in hardware (torch exposes no public check)
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return "bf16" if any(getattr(torch.cpu, name, lambda: False)() for name in checks) else "fp32"


def device_kind(device: str) -> str:
    """"cuda" for any CUDA device, else "cpu": the key of the per-device tables and torch.autocast's device type."""
    return "cuda" if device.startswith("cuda") else "cpu"


def embed_batch_size(setting: int | str, device: str) -> int:
    return AUTO_EMBED_BATCH[device_kind(device)] if setting == "auto" else setting


def autocast(device: str, precision: str) -> contextlib.AbstractContextManager:
    if precision == "fp32":
        return contextlib.nullcontext()
    import torch

    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device_kind(device), dtype=dtype)
