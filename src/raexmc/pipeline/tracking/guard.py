"""A stage runs alone in its working copy and logs only with the params its DVC command set: `dvc exp run -S`
writes params.yaml before it takes any lock, so a second experiment started in the same workspace rewrites the
first one's params. Queued and `--temp` experiments run in copies, each with its own lock."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from ...errors import ConcurrentRunError
from .identity import experiment_name, working_copy

PARALLEL_HINT = ("run experiments side by side with `raexmc sweep` or `dvc exp run --queue` "
                 "(each runs in its own copy of the project)")
LOCK_FILE = Path(".dvc", "tmp", "raexmc-stage.lock")
_MISSING = object()
_MAX_HOPS = 5  # DVC runs a stage's cmd through `sh -c`; train or embed under torchrun adds its launcher and torchrun


class ParamsGuard:
    """The params file as a stage read it at its start."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.content = self._read()

    def _read(self) -> bytes | None:
        with suppress(FileNotFoundError):
            return self.path.read_bytes()
        return None

    def check(self) -> None:
        if self._read() != self.content:
            raise ConcurrentRunError("changed while this stage ran (another `dvc exp run` in this workspace?), "
                                     f"so its results are not logged or kept; {PARALLEL_HINT}", self.path)

    def check_dvc_overrides(self, tree: dict[str, Any]) -> None:
        """ConcurrentRunError if `tree` lacks a `-S` value of the `dvc exp run` running this stage."""
        for file, key, text in set_params(dvc_command() or []):
            if Path(file).resolve() != self.path.resolve():
                continue
            try:
                wanted = YAML(typ="safe", pure=True).load(text)  # as DVC writes it into the params file
            except YAMLError:
                continue
            found = _dotted(tree, key)
            if wanted != found:
                held = "nothing" if found is _MISSING else repr(found)
                raise ConcurrentRunError(f"holds {held}, but the `dvc exp run` running this stage set {key}={text}: "
                                         f"another `dvc exp run` in this workspace rewrote it, so nothing is logged "
                                         f"or kept; {PARALLEL_HINT}", self.path, key)


def _dotted(tree: dict[str, Any], key: str) -> Any:
    node: Any = tree
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


@contextmanager
def one_stage_at_a_time(params_path: str | os.PathLike, stage: str) -> Iterator[None]:
    """Hold the working copy's stage lock: DVC runs an execution's stages one at a time, so another here is a
    second execution's."""
    root = working_copy(Path(params_path).resolve().parent)
    if root is None:
        yield
        return
    path = root / LOCK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another stage"
            raise ConcurrentRunError(f"{holder} is running in this workspace, and a second run here would "
                                     f"rewrite its params; {PARALLEL_HINT}", path) from None
        handle.truncate(0)
        name = experiment_name()
        execution = "`dvc repro`" if name == "workspace" else f"experiment '{name}'"
        handle.write(f"stage '{stage}' of {execution} (pid {os.getpid()})\n")
        handle.flush()
        yield  # the lock goes with the file's closing


def _proc(pid: int, name: str) -> bytes | None:
    with suppress(OSError):
        return Path(f"/proc/{pid}/{name}").read_bytes()
    return None


def dvc_command() -> list[str] | None:
    """The arguments after `dvc` of the `dvc` process a few processes above this stage; None outside DVC or /proc."""
    if not os.environ.get("DVC_STAGE"):
        return None
    pid = os.getppid()
    for _ in range(_MAX_HOPS):
        raw = _proc(pid, "cmdline")
        if raw is None:
            return None
        argv = [arg.decode(errors="replace") for arg in raw.split(b"\0")[:-1]]
        at = next((at for at, arg in enumerate(argv[:3]) if Path(arg).name == "dvc"), None)
        if at is not None:
            return argv[at + 1:]
        stat = _proc(pid, "stat")
        if stat is None:
            return None
        pid = int(stat.decode().rsplit(")", 1)[1].split()[1])  # the name in parentheses may hold spaces
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
    """The words of a `dvc repro` or `dvc exp run` that are no option (an option's value too: harmless), less their
    dvc.yaml's path; None for another command (`dvc exp exec-run`)."""
    words = args[1:] if args[:1] == ["repro"] else args[2:] if args[:2] == ["exp", "run"] else None
    return None if words is None else [word.rpartition(":")[2] for word in words if not word.startswith("-")]
