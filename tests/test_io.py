"""Stage files. Atomic outputs: what a killed writer left beside its target is removed by the next writer of
that target, or by the sweep of a whole output tree, and nothing else is. A memory-mapped output has its bytes
on disk before it is written. Reading: a missing, cut or foreign file is one DataError naming it."""

from __future__ import annotations

import errno
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from raexmc.errors import DataError
from raexmc.io import (
    atomic_dir,
    atomic_file,
    load_array,
    load_arrays,
    load_sparse,
    mark_empty,
    new_memmap,
    read_json,
    remove_dead_temps,
    scratch_dir,
    write_json,
)
from tests.helpers import REPO, leftover_of_killed_writer, run_on_small_disk, writer_in_progress


def test_next_atomic_dir_removes_a_killed_writers_temporary_folder(tmp_path):
    target = tmp_path / "tokens"
    leftover = leftover_of_killed_writer(target)
    assert leftover.parent == tmp_path and (leftover / "half-written.bin").is_file()
    (tmp_path / ".tokens.old").mkdir()  # a previous output set aside when a swap was cut short
    with atomic_dir(target) as folder:
        (folder / "meta.json").write_text("{}")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")] and (target / "meta.json").is_file()


def test_next_atomic_file_removes_leftover_temporaries_and_only_those(tmp_path):
    stale = [".stats.abcd1234.tmp",  # named the way temporaries were before they carried a process id
             ".stats.json.99999999-x.tmp",  # pid 99999999 is above any pid_max Linux allows: not running
             ".stats.json.old"]
    kept = [".stats.json.1-abc.tmp",  # pid 1 (init) runs
            ".stats.jsonl.ab12.tmp", ".other.ab12.tmp", ".stats.tmp", ".stats.x", "stats.tmp"]  # other targets
    for name in stale + kept:
        (tmp_path / name).write_text("")
    with atomic_file(tmp_path / "stats", "w") as handle:
        handle.write("x")
    write_json(tmp_path / "stats.json", {"a": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*kept, "stats", "stats.json"])


def test_a_temporary_whose_writer_still_runs_is_kept(tmp_path):
    target = tmp_path / "data"
    with writer_in_progress(target) as (writer, tmp):
        with atomic_dir(target) as folder:
            (folder / "done").write_text("")
        assert writer.poll() is None and (tmp / "half-written.bin").is_file()
    assert (target / "done").is_file()


SCRATCH_WRITER = """
import sys, time
from raexmc.io import scratch_dir
with scratch_dir(sys.argv[1]) as folder:
    (folder / "graphs.bin").write_bytes(bytes(4096))
    print(folder, flush=True)
    time.sleep(600)
"""


def test_the_sweep_removes_dead_writers_temporaries_and_scratch_at_any_depth_and_only_those(tmp_path):
    """Cause 6 of issue 60: the package stage's scratch was tempfile's tmpXXXXXXXX beside the predictor, which no
    sweep knew; `kill -9` left it for good. Named as the output's temporaries, the next sweep removes it."""
    tree, target = tmp_path / "artifacts" / "tiny", tmp_path / "artifacts" / "tiny" / "predictor"
    dead = [leftover_of_killed_writer(tree / "index"), tree / "eval" / ".metrics.json.99999999-ab_1.tmp"]
    kept = [tree / ".gitignore", tree / ".stats.abcd1234.tmp",  # no process id: whose it is cannot be told
            tree / "eval" / "run.1-abc.tmp", tree / "eval" / ".a.tmp", tree / "eval" / ".x.12.tmp"]
    for path in dead[1:] + kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    scratch_writer = subprocess.Popen([sys.executable, "-c", SCRATCH_WRITER, str(target)], stdout=subprocess.PIPE,
                                      text=True)
    scratch = Path(scratch_writer.stdout.readline().strip())
    with writer_in_progress(tree / "memory") as (writer, live):
        remove_dead_temps(tmp_path)
        assert writer.poll() is None and (live / "half-written.bin").is_file(), "a running writer's temporary stays"
    assert [path.exists() for path in dead] == [False, False]
    assert all(path.exists() for path in kept)
    assert (scratch / "graphs.bin").is_file(), "a running writer's scratch stays"
    scratch_writer.kill()
    scratch_writer.wait()
    scratch_writer.stdout.close()
    remove_dead_temps(tmp_path)
    assert not scratch.exists() and scratch.parent == target.parent
    with scratch_dir(target) as folder:
        (folder / "x").write_text("")
    assert not folder.exists(), "a scratch is removed when its work ends"


@pytest.mark.parametrize("reserve", ["posix_fallocate", "written zeros"])
def test_a_new_memmap_has_its_bytes_on_disk_before_it_is_written_or_is_an_oserror_naming_it(tmp_path, monkeypatch,
                                                                                            reserve):
    """numpy's own memory-mapped file is a hole its first stores fill; ours is the same file, reserved. On a disk
    that cannot hold it, in a process of its own: were the reservation missing, the stores would be SIGBUS."""
    if reserve == "written zeros":
        monkeypatch.delattr(os, "posix_fallocate")  # as on macOS
    array = new_memmap(tmp_path / "ours.npy", np.float32, (1000, 64))
    reference = np.lib.format.open_memmap(tmp_path / "numpy.npy", mode="w+", dtype=np.float32, shape=(1000, 64))
    size = (tmp_path / "numpy.npy").stat().st_size
    assert (tmp_path / "ours.npy").stat().st_size == size
    assert (tmp_path / "ours.npy").stat().st_blocks * 512 >= size > (tmp_path / "numpy.npy").stat().st_blocks * 512
    values = np.random.default_rng(0).standard_normal((1000, 64), dtype=np.float32)
    array[:], reference[:] = values, values
    array.flush(), reference.flush()
    assert (tmp_path / "ours.npy").read_bytes() == (tmp_path / "numpy.npy").read_bytes()
    small, path = tmp_path / "small", tmp_path / "small" / "keys.npy"
    script = ("import os, sys; from raexmc.io import new_memmap\n"
              f"if {reserve == 'written zeros'}: del os.posix_fallocate\n"
              "new_memmap(sys.argv[1], 'float32', (1 << 20,))[:] = 1.0")
    done = run_on_small_disk(small, 1 << 20, [sys.executable, "-c", script, str(path)], tmp_path)
    assert done.proc.returncode == 1, done.proc.stderr
    assert done.proc.stderr.strip().splitlines()[-1].endswith(
        f"] {done.error} (the array needs 4,194,304 bytes): '{path}'")


def cut_in_half(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return path


@pytest.mark.parametrize("mmap_mode", [None, "r"])
def test_a_missing_cut_zero_byte_or_foreign_file_is_one_error_naming_it(tmp_path, mmap_mode):
    """A zero-byte file is what a write cut off before its first byte leaves (numpy: an EOFError)."""
    np.save(tmp_path / "keys.npy", np.ones((100, 8), np.float32))
    (tmp_path / "train.npy").write_bytes(b"")
    (tmp_path / "text.npy").write_bytes(b"hello")
    for name, says in (("keys.npy", "unreadable array"), ("train.npy", "unreadable array"),
                       ("text.npy", "unreadable array"), ("absent.npy", "file not found")):
        with pytest.raises(DataError) as error:
            load_array(cut_in_half(tmp_path / name) if name == "keys.npy" else tmp_path / name, mmap_mode=mmap_mode)
        assert error.value.one_line().startswith(f"DataError: {tmp_path / name}: {says}")
    sp.save_npz(tmp_path / "Y.npz", sp.random(200, 50, density=0.2, format="csr", random_state=0))
    with pytest.raises(DataError, match=r"Y.npz: unreadable sparse matrix"):
        load_sparse(cut_in_half(tmp_path / "Y.npz"))
    np.savez(tmp_path / "per_instance.npz", a=np.arange(1000.0), b=np.arange(1000.0))
    with pytest.raises(DataError, match=r"per_instance.npz: unreadable archive"):
        load_arrays(cut_in_half(tmp_path / "per_instance.npz"))
    (tmp_path / "memory.json").write_text('{\n  "keep": 1.0\n')
    with pytest.raises(DataError, match=r"memory.json:3: not valid JSON"):
        read_json(tmp_path / "memory.json")


# Each writes one output whose library does not check its writes (or does not say which write failed), into the
# folder given as sys.argv[1], inside the stages' one-line error handling.
_UNCHECKED_WRITERS = {
    "hnswlib": "from raexmc.memory.hnsw import build_hnsw; from raexmc.memory.persistence import save_index\n"
               "save_index(build_hnsw(keys, M=16, ef_construction=40, progress=False), out)",
    "faiss": "from raexmc.memory.compression import parse_compression\n"
             "from raexmc.memory.faiss_index import build_faiss; from raexmc.memory.persistence import save_index\n"
             "save_index(build_faiss(keys, parse_compression('sq8'), M=16, ef_construction=40), out)",
    "numpy": "from raexmc.io import atomic_dir, save_array\n"
             "with atomic_dir(out) as tmp: save_array(tmp / 'keys.npy', keys)",
    "torch": "import torch; from raexmc.io import atomic_dir, written_through\n"
             "with atomic_dir(out) as tmp, written_through(tmp / 'last.pt') as handle:\n"
             "    torch.save(torch.from_numpy(keys), handle)"}
_UNDER_STAGE_ERRORS = """
import sys
import numpy as np
from pathlib import Path
import typer
from raexmc.pipeline.tracking.stage import user_errors
out = Path(sys.argv[1])
keys = np.random.default_rng(0).normal(size=(4000, 32)).astype(np.float32)
try:
    with user_errors():
{body}
except typer.Exit as done:
    sys.exit(done.exit_code)
"""


def unchecked_write(library: str, out) -> list[str]:
    """The command that writes `out` with `library`, as a stage would."""
    body = "\n".join(f"        {line}" for line in _UNCHECKED_WRITERS[library].splitlines())
    return [sys.executable, "-c", _UNDER_STAGE_ERRORS.format(body=body), str(out)]


def assert_one_line_and_nothing_left(proc, out, error: str, fix: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith(f"StorageError: {out}/"), line
    assert f": {error} " in line and fix in line, line
    assert os.listdir(out.parent) == [], "no output folder and no temporary"


def limited_file_size():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing
    resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


@pytest.mark.parametrize("library", sorted(_UNCHECKED_WRITERS))
@pytest.mark.parametrize("cut_by", ["file size limit", "full disk"])
def test_an_output_cut_short_is_one_line_and_is_not_kept(tmp_path, library, cut_by):
    """Under `ulimit -f`, hnswlib writes a short graph and says nothing, faiss prints a failed fclose (or raises its
    own error), numpy raises an OSError with no errno and torch a RuntimeError ('unexpected pos'). Each output is
    checked against what its library wrote before it is renamed into place: one line naming the file, exit 2, no
    output folder and no temporary left. The same on a 200 KB disk (a tmpfs, or the file-size limit where the kernel
    forbids mounting one), where a short file below the file-size limit is named a full disk."""
    if cut_by == "file size limit":
        proc = subprocess.run(unchecked_write(library, tmp_path / "out"), capture_output=True, text=True,
                              preexec_fn=limited_file_size)
        return assert_one_line_and_nothing_left(proc, tmp_path / "out", os.strerror(errno.EFBIG), "ulimit -f")
    done = run_on_small_disk(tmp_path / "small", 200_000, unchecked_write(library, tmp_path / "small" / "out"),
                             tmp_path)
    fix = "ulimit -f" if done.error == os.strerror(errno.EFBIG) else "free some space and rerun"
    assert_one_line_and_nothing_left(done.proc, tmp_path / "small" / "out", done.error, fix)
    assert done.left == []


def test_an_empty_output_folder_holds_the_placeholder_dvc_ignores_and_a_filled_one_does_not(tmp_path):
    from raexmc.io.atomic import EMPTY_MARK

    mark_empty(tmp_path)
    assert [path.name for path in tmp_path.iterdir()] == [EMPTY_MARK]
    assert EMPTY_MARK in (REPO / ".dvcignore").read_text().splitlines(), "DVC must not hash the placeholder"
    mark_empty(tmp_path)
    assert [path.name for path in tmp_path.iterdir()] == [EMPTY_MARK], "once"
    (tmp_path / "last.pt").write_bytes(b"a checkpoint")
    mark_empty(tmp_path)
    assert [path.name for path in tmp_path.iterdir()] == ["last.pt"], "a folder with a file is not empty"
