"""Atomic outputs: what a killed writer left beside its target is removed by the next writer of
that target, and nothing else is."""

from __future__ import annotations

from raexmc.io import atomic_dir, atomic_file, write_json

from conftest import leftover_of_killed_writer, writer_in_progress


def hidden(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_next_atomic_dir_removes_a_killed_writers_temporary_folder(tmp_path):
    target = tmp_path / "tokens"
    leftover = leftover_of_killed_writer(target)
    assert leftover.parent == tmp_path and (leftover / "half-written.bin").is_file()
    (tmp_path / ".tokens.old").mkdir()  # a previous output set aside when a swap was cut short
    with atomic_dir(target) as folder:
        (folder / "meta.json").write_text("{}")
    assert hidden(tmp_path) == [] and (target / "meta.json").is_file()


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
