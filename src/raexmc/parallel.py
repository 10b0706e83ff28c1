"""Independent blocks of work run on every core, results in order, so no output depends on how many processes ran;
`RAEXMC_WORKERS` sets them (default: every core this process may use), and so is no params key."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from .errors import ConfigError, WorkerError

WORKERS_VARIABLE = "RAEXMC_WORKERS"
IN_FLIGHT_PER_WORKER = 2  # blocks queued per worker: enough to keep it busy, few enough to keep memory flat

Shared = TypeVar("Shared")
Block = TypeVar("Block")
Result = TypeVar("Result")


def worker_count() -> int:
    """Processes for block-parallel work: RAEXMC_WORKERS, or every core this process may use."""
    value = os.environ.get(WORKERS_VARIABLE, "").strip()
    if not value:
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except AttributeError:  # not on Linux
            return max(1, os.cpu_count() or 1)
    if not value.isdigit() or int(value) < 1:
        raise ConfigError(f"the environment variable {WORKERS_VARIABLE} must be a whole number of processes >= 1, "
                          f"got {value!r}")
    return int(value)


_worker_shared: Any = None  # in a worker process: the `shared` value it was started with


def _start_worker(shared: Any) -> None:
    """The Rust tokenizer's own thread pool would oversubscribe the cores (and warn of the fork): off in workers."""
    global _worker_shared
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _worker_shared = shared


def _run_block(function: Callable[[Any, Any], Any], block: Any) -> Any:
    return function(_worker_shared, block)


def ordered_map(function: Callable[[Shared, Block], Result], shared: Shared, blocks: Iterable[Block],
                workers: int) -> Iterator[Result]:
    """`function(shared, block)` for each block, yielded in order, over `workers` processes (one: here, pickling
    nothing). `shared` reaches each process once, at its start; `function` is pickled by name (no lambda). A few
    blocks per worker are queued, so a generator streams; a worker's exception is raised here, a dead worker is a
    WorkerError."""
    if workers == 1:
        for block in blocks:
            yield function(shared, block)
        return
    pool = ProcessPoolExecutor(workers, initializer=_start_worker, initargs=(shared,))
    pending: deque[Future] = deque()
    try:
        for block in blocks:
            pending.append(pool.submit(_run_block, function, block))
            if len(pending) >= IN_FLIGHT_PER_WORKER * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    except BrokenProcessPool:
        raise WorkerError(f"a worker process died (killed, or out of memory?); {WORKERS_VARIABLE}=1 runs the work "
                          f"in one process, a smaller {WORKERS_VARIABLE} in fewer") from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
