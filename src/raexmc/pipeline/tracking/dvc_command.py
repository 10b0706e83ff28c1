"""The `dvc` command line that runs this stage, read from /proc: the params it set with `-S`, the stages it names."""

from __future__ import annotations

import os
from pathlib import Path

# DVC runs a stage's cmd through a shell (`sh -c cmd`); train or embed under torchrun adds its launcher and torchrun
_MAX_HOPS = 5


def _cmdline(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [arg.decode(errors="replace") for arg in raw.split(b"\0")[:-1]]


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # the name in parentheses may hold spaces


def _dvc_args(argv: list[str]) -> list[str] | None:
    """The arguments after `dvc` in a process's argv: `dvc ARGS` (a console script, which runs as
    `python .../bin/dvc ARGS`) or `python -m dvc ARGS`; None for any other process."""
    for at, arg in enumerate(argv[:3]):
        if Path(arg).name == "dvc":
            return argv[at + 1:]
    return None


def dvc_command() -> list[str] | None:
    """The arguments of the `dvc` process this stage runs under (its parent, or an ancestor a few
    processes up); None outside DVC or where /proc is not there."""
    if not os.environ.get("DVC_STAGE"):
        return None
    pid = os.getppid()
    for _ in range(_MAX_HOPS):
        argv = _cmdline(pid)
        if argv is None:
            return None
        args = _dvc_args(argv)
        if args is not None:
            return args
        pid = _parent(pid)
        if pid is None:
            return None
    return None


def set_params(args: list[str]) -> list[tuple[str, str, str]]:
    """(file, key, value text) of each `-S [file:]key=value` of a `dvc exp run` command line
    (Hydra's `+`/`++` prefixes dropped; deletions `~key` and other commands give nothing)."""
    if args[:2] != ["exp", "run"]:
        return []
    overrides, rest = [], iter(args[2:])
    for arg in rest:
        if arg in ("-S", "--set-param"):
            overrides.append(next(rest, ""))
        elif arg.startswith("--set-param="):
            overrides.append(arg.split("=", 1)[1])
        elif arg.startswith("-S"):
            overrides.append(arg[2:])
    found = []
    for override in overrides:
        target, sep, value = override.partition("=")
        file, _, key = target.rpartition(":")
        key = key.lstrip("+")
        if sep and key and not key.startswith("~"):
            found.append((file or "params.yaml", key, value))
    return found


def dvc_targets(args: list[str]) -> list[str] | None:
    """The stage names a `dvc repro` or `dvc exp run` command line may name as its targets: each word that is not
    an option (an option's value too, which is harmless where it only has a stage write its journal), less its
    dvc.yaml's path; None for another command (a queued experiment's `dvc exp exec-run`)."""
    words = args[1:] if args[:1] == ["repro"] else args[2:] if args[:2] == ["exp", "run"] else None
    return None if words is None else [word.rpartition(":")[2] for word in words if not word.startswith("-")]
