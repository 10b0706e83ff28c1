"""The checkpoint file on its own: a damaged one stops a resume in one line that says what to do, and a save
killed half way leaves the previous checkpoint whole and a temporary that the stages' sweep removes."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from raexmc.errors import DataError
from raexmc.io import remove_dead_temps
from raexmc.training.checkpoint import Checkpoint, run_fingerprint, save_checkpoint


def checkpoint(path) -> Checkpoint:
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    return Checkpoint(path, "fingerprint", model, optimizer, scheduler, every=1, last_step=4, is_main=True)


def saved_state(ckpt: Checkpoint, step: int) -> dict:
    return {"model": ckpt.model.state_dict(), "optimizer": ckpt.optimizer.state_dict(),
            "scheduler": ckpt.scheduler.state_dict(), "torch_rng": torch.get_rng_state(), "step": step,
            "negatives": None, "fingerprint": ckpt.fingerprint, "elapsed_s": 1.0, "history": []}


@pytest.mark.parametrize("damage", ["cut", "garbage", "empty", "not-a-checkpoint"])
def test_a_damaged_checkpoint_stops_the_resume_in_one_line_naming_it(tmp_path, damage):
    """A bare torch.load ended the train stage in a 105-line traceback that named neither the file nor the fix."""
    path = tmp_path / "last.pt"
    ckpt = checkpoint(path)
    save_checkpoint(path, saved_state(ckpt, 2))
    whole = path.read_bytes()
    damaged = {"cut": whole[:len(whole) // 2], "garbage": b"\x80\x03garbage" * 50, "empty": b""}
    if damage == "not-a-checkpoint":
        torch.save(torch.zeros(3), path)
    else:
        path.write_bytes(damaged[damage])
    with pytest.raises(DataError) as stopped:
        ckpt.resume("cpu")
    line = stopped.value.one_line()
    assert line.startswith(f"DataError: {path}: damaged checkpoint ("), line
    assert line.endswith("): delete it to restart training from step 0"), line
    assert "\n" not in line


_KILLED_SAVE = """
import sys, time
from pathlib import Path
from raexmc.training.checkpoint import save_checkpoint

class Slow:
    def __reduce__(self):
        print("saving", flush=True)
        time.sleep(600)

save_checkpoint(Path(sys.argv[1]), {"step": 2, "slow": Slow()})
"""


def test_a_save_killed_half_way_leaves_a_temporary_the_sweep_removes(tmp_path):
    """A kill during a save left `last.pt.tmp`, which no sweep matched: it stayed beside the checkpoints for good."""
    path = tmp_path / "checkpoints" / "last.pt"
    path.parent.mkdir()
    save_checkpoint(path, {"step": 1})
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_SAVE, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "saving"
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    assert len(list(path.parent.iterdir())) == 2, "the killed save's temporary is there"
    remove_dead_temps(tmp_path)
    assert [p.name for p in path.parent.iterdir()] == ["last.pt"]
    assert torch.load(path, weights_only=False) == {"step": 1}


def test_a_run_fingerprint_changes_with_each_thing_a_resume_must_match():
    parts = ["enc", {"pooling": "mean"}, SimpleNamespace(lr=1e-4), {"N_train": 10}, {"input_max_len": 16}, 1]
    base = run_fingerprint(*parts)
    assert run_fingerprint(*parts) == base
    changed = ["other", {"pooling": "cls"}, SimpleNamespace(lr=2e-4), {"N_train": 11}, {"input_max_len": 32}, 2]
    for at, value in enumerate(changed):
        assert run_fingerprint(*parts[:at], value, *parts[at + 1:]) != base, f"part {at} left it unchanged"
