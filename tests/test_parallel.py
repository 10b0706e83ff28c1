"""Block-parallel work: results in the blocks' order for any number of workers, a worker's error raised in the
parent as the same one-line error, a dead worker a one-line WorkerError, and the worker count from the environment."""

from __future__ import annotations

import os
import signal

import pytest

from raexmc.errors import ConfigError, DataError, WorkerError
from raexmc.parallel import ordered_map, worker_count


def scaled_with_pid(factor: int, block: int) -> tuple[int, int]:
    return factor * block, os.getpid()


def misbehave(how: str, block: int) -> int:
    """Raises at block 7 (`how` "raise") or is killed at block 3 ("die")."""
    if how == "raise" and block == 7:
        raise DataError("not a text record", "data/train.jsonl", 8)
    if how == "die" and block == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return block


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_results_come_in_the_blocks_order_from_the_workers(workers):
    results = list(ordered_map(scaled_with_pid, 10, iter(range(25)), workers))
    assert [value for value, _ in results] == [10 * block for block in range(25)]  # map(), by hand
    processes = {pid for _, pid in results}
    assert (processes == {os.getpid()}) if workers == 1 else (os.getpid() not in processes)


@pytest.mark.parametrize("workers", [1, 2])
def test_an_error_in_a_worker_is_raised_here_as_the_same_one_line_error_and_a_dead_one_is_a_worker_error(workers):
    with pytest.raises(DataError) as raised:
        list(ordered_map(misbehave, "raise", range(20), workers))
    assert str(raised.value) == "DataError: data/train.jsonl:8: not a text record"
    assert (raised.value.path, raised.value.record) == ("data/train.jsonl", 8)
    if workers == 1:  # no worker process to die
        return
    with pytest.raises(WorkerError, match="a worker process died .* RAEXMC_WORKERS=1"):
        list(ordered_map(misbehave, "die", range(10), 2))


def test_the_worker_count_comes_from_the_environment_or_the_cores(monkeypatch):
    monkeypatch.delenv("RAEXMC_WORKERS", raising=False)
    assert worker_count() == len(os.sched_getaffinity(0))
    monkeypatch.setenv("RAEXMC_WORKERS", "3")
    assert worker_count() == 3
    for bad in ("0", "-1", "two", "1.5"):
        monkeypatch.setenv("RAEXMC_WORKERS", bad)
        with pytest.raises(ConfigError, match=f"RAEXMC_WORKERS must be a whole number .* got '{bad}'"):
            worker_count()
