"""Grid sweeps as queued DVC experiments, run by N queue workers, waited for and shown with `dvc exp show`; each is
one MLflow run of the same name."""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from ..errors import PARAMS_FILE, ConfigError, RaexmcError
from ..evaluation.significance import METHOD
from .tracking.identity import UNCOMMITTED, git_commit

KEY_METRICS = ("P@1", "P@5", "R@100")   # RAE's, from its headline row (results.py)
# How `dvc exp show` heads a column of RAE's headline row: the metric names are shared by every row's file
RAE_COLUMN = rf"metrics/[^/:]+/{METHOD}\.json:"
_QUEUED = re.compile(r"Queued experiment '([^']+)'")
_PENDING = ("Queued", "Running")


class SweepError(RaexmcError):
    """An experiment of the sweep failed or DVC refused the sweep."""


def _dvc(args: list[str], cwd: Path) -> str:
    proc = subprocess.run(["dvc", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        raise SweepError(f"`dvc {' '.join(args)}` failed: {lines[-1] if lines else proc.returncode}")
    return proc.stdout + proc.stderr


def swept_keys(overrides: list[str]) -> list[str]:
    keys = []
    for override in overrides:
        key, sep, values = override.partition("=")
        if not sep or not key or not values:
            raise ConfigError(f"'{override}' is not key=value[,value...]", PARAMS_FILE, key or None)
        keys.append(key)
    return keys


def queue(overrides: list[str], cwd: Path) -> list[str]:
    """Queue the grid of `overrides`; the names DVC gave the experiments."""
    output = _dvc(["exp", "run", "--queue", *[arg for o in overrides for arg in ("-S", o)]], cwd)
    return _QUEUED.findall(output)


def task_states(status_output: str) -> dict[str, str]:
    states = {}
    for line in status_output.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[0] != "Task" and not line.startswith("Worker"):
            states[fields[1]] = fields[-1]
    return states


def wait(names: list[str], cwd: Path, poll_s: float = 10.0,
         report: Callable[[dict[str, str]], None] = lambda states: None) -> dict[str, str]:
    """Block until none of `names` is queued or running; their final states."""
    while True:
        states = task_states(_dvc(["queue", "status"], cwd))
        mine = {name: states.get(name, "Unknown") for name in names}
        report(mine)
        if not any(state in _PENDING for state in mine.values()):
            return mine
        time.sleep(poll_s)


def baseline(cwd: Path) -> str:
    """The commit the experiments derive from (`dvc exp show` lists them under it after HEAD moves on)."""
    commit = git_commit(cwd)
    if commit == UNCOMMITTED:
        raise SweepError("a sweep needs a git commit to derive experiments from (git rev-parse HEAD failed)")
    return commit


def run_sweep(overrides: list[str], jobs: int, cwd: Path, poll_s: float = 10.0,
              report: Callable[[dict[str, str]], None] = lambda states: None) -> list[str]:
    """Queue, start `jobs` workers, wait; the names of the experiments (SweepError if one failed)."""
    names = queue(overrides, cwd)
    if not names:
        raise SweepError("DVC queued no experiment")
    # The workers outlive `dvc queue start` and would hold captured pipes open until they finish.
    if subprocess.run(["dvc", "queue", "start", "-j", str(jobs)], cwd=cwd, stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode != 0:
        raise SweepError("`dvc queue start` failed; see `dvc queue status`")
    states = wait(names, cwd, poll_s, report)
    failed = sorted(name for name, state in states.items() if state != "Success")
    if failed:
        raise SweepError(f"{len(failed)} of {len(names)} experiments did not succeed ({', '.join(failed)}); "
                         f"see `dvc queue logs {failed[0]}`")
    return names


def show_columns(keys: list[str]) -> str:
    """The --keep pattern of `dvc exp show` for the swept params, RAE's key metrics and the λ and τ it used."""
    names = [re.escape(name) for name in ("Experiment", *keys, "lambda", "tau")]
    metrics = RAE_COLUMN + "(" + "|".join(map(re.escape, KEY_METRICS)) + ")"
    return "^(" + "|".join([*names, metrics]) + ")$"


def show_command(keys: list[str], commit: str) -> list[str]:
    return ["dvc", "exp", "show", "--md", "--hide-workspace", "--hide-queued", "--rev", commit, "--drop", ".*",
            "--keep", show_columns(keys)]
