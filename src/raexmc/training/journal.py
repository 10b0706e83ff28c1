"""What the training loop reports on rank 0: loss and throughput between rounds, the history (in the checkpoint,
so a resumed run returns its interrupted start's rows too) and a progress bar."""

from __future__ import annotations

import time
from collections.abc import Callable

from ..process_group import DistContext
from ..progress import progress_bar
from .settings import TrainSettings


class Journal:
    """The current window (steps since the last mining round), the history of logged rows, the progress bar."""

    def __init__(self, settings: TrainSettings, ctx: DistContext, start_step: int, elapsed_s: float,
                 history: list[dict[str, float]], log: Callable[[int, dict[str, float]], None]):
        self.is_main, self.start_step = ctx.is_main, start_step
        self.global_batch = settings.batch_size * ctx.world_size
        self.history, self.log = history, log
        self.bar = progress_bar(total=settings.max_steps, initial=start_step, desc="train", unit="step",
                                disable=not ctx.is_main, mininterval=2.0)
        self.started = time.perf_counter() - elapsed_s
        self._open_window()

    def _open_window(self) -> None:
        self.window_start, self.window_loss, self.window_steps = time.perf_counter(), 0.0, 0

    def _window_loss(self) -> float:
        return self.window_loss / max(self.window_steps, 1)

    def elapsed_s(self) -> float:  # those before a resume included
        return time.perf_counter() - self.started

    def _record(self, step: int, values: dict[str, float]) -> None:
        if self.is_main:
            self.history.append({"step": step, **values})
            self.log(step, values)

    def mined(self, step: int, validation: dict[str, float], lr: float) -> None:
        """A mining round ran before `step`: log the window it closes (none at the start) and open the next."""
        seconds = time.perf_counter() - self.window_start
        window = {"loss": self._window_loss(), "lr": lr,
                  "examples_per_s": self.window_steps * self.global_batch / max(seconds, 1e-9)}
        self._record(step, {**(window if step > self.start_step else {}), "elapsed_s": self.elapsed_s(),
                            **validation})
        self._open_window()

    def stepped(self, loss: float) -> None:
        self.window_loss += loss
        self.window_steps += 1
        self.bar.update(1)
        self.bar.set_postfix(loss=f"{loss:.3f}", refresh=False)

    def close(self) -> None:
        self.bar.close()

    def finished(self, step: int, validation: dict[str, float]) -> None:
        """The round after the last step: log the last window's loss with its validation."""
        self._record(step, {"loss": self._window_loss(), "elapsed_s": self.elapsed_s(), **validation})


def as_table(history: list[dict[str, float]]) -> list[dict[str, float | None]]:
    """The history with every column in every row (None where a round had none): DVC plots only matching rows."""
    columns = sorted({column for row in history for column in row})
    return [{column: row.get(column) for column in columns} for row in history]
