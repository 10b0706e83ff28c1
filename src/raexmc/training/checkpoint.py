"""The resumable state of a training run in one file, written by rank 0 every `checkpoint_every` steps; resumed only
when its fingerprint matches."""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import DataError, first_line
from ..io import atomic_file, checked_writes


def run_fingerprint(encoder_name: str, recipe: Any, settings: Any, data_stats: dict[str, Any],
                    token_key: dict[str, Any], world_size: int) -> str:
    """What a checkpoint must match to be resumed (grad_cache_chunk left out: it changes a step's memory, as the
    card's size resolves it, not the step)."""
    recipe_keys = {key: value for key, value in vars(settings).items() if key != "grad_cache_chunk"}
    return hashlib.sha256(json.dumps([encoder_name, recipe, recipe_keys, data_stats, token_key, world_size],
                                     sort_keys=True).encode()).hexdigest()


@dataclass
class Resumed:
    """Where training picks up: step 0 with nothing mined, or what a matching checkpoint holds."""
    step: int = 0
    negatives: np.ndarray | None = None
    elapsed_s: float = 0.0
    history: list[dict[str, float]] = field(default_factory=list)


@dataclass
class Checkpoint:
    """The checkpoint file of one training run and the objects whose state it holds."""
    path: Path
    fingerprint: str
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    every: int
    last_step: int
    is_main: bool

    def resume(self, device: str) -> Resumed:
        """Load the model, optimizer, scheduler and RNG state from the file when its fingerprint matches."""
        state = self._saved_state(device) if self.path.is_file() else None
        if state is None or state.get("fingerprint") != self.fingerprint:
            return Resumed()
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        if self.is_main:
            print(f"resuming from {self.path} at step {state['step']}", file=sys.stderr)
        return Resumed(state["step"], state["negatives"], state["elapsed_s"], state.get("history", []))

    def _saved_state(self, device: str) -> dict[str, Any]:
        """The file's state, or one DataError naming it when it is damaged (whatever unpickling raises)."""
        try:
            state = torch.load(self.path, map_location=device, weights_only=False)
            reason = None if isinstance(state, dict) else f"it holds a {type(state).__name__}, not a training state"
        except OSError:
            raise
        except Exception as exc:
            reason = first_line(exc).split(". ")[0]
        if reason is not None:
            raise DataError(f"damaged checkpoint ({reason}): delete it to restart training from step 0", self.path)
        return state

    def save_if_due(self, done: int, negatives: np.ndarray, elapsed_s: float, history: list[dict[str, float]]) -> None:
        """On rank 0, after every `every` steps and after the last one, save the state after `done` steps."""
        if self.is_main and (done % self.every == 0 or done == self.last_step):
            save_checkpoint(self.path, {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                                        "scheduler": self.scheduler.state_dict(), "torch_rng": torch.get_rng_state(),
                                        "step": done, "negatives": negatives, "fingerprint": self.fingerprint,
                                        "elapsed_s": elapsed_s, "history": history})


def save_checkpoint(path: Path, state: dict[str, Any]) -> None:  # atomically: a killed run leaves the last whole
    with atomic_file(path, "wb") as handle, checked_writes(handle) as checked:
        torch.save(state, checked)
