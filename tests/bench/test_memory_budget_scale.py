"""bench/memory_budget.py scale on a small made-up project: one row per variant with its key count, the
bytes as the files evaluate and predict load, the index stage's build time counted where RAE searches
its indexes, and the index stage built once across runs."""

from __future__ import annotations

import json
import subprocess
import sys

import scipy.sparse as sp

from test_memory_budget import small_project
from tests.helpers import REPO


def run_scale(root, variants, *args, ok=True):
    out = root / "scale.json"
    proc = subprocess.run([sys.executable, str(REPO / "bench/memory_budget.py"), "scale", "--dataset",
                           str(root / "data" / "tiny"), "--embeddings", str(root / "artifacts" / "tiny" / "embeddings"),
                           "--work", str(root / "work"), "--variants", variants, "--queries", "5", "--out", str(out),
                           *args], cwd=root, capture_output=True, text=True)
    assert (proc.returncode == 0) == ok, proc.stderr
    return json.loads(out.read_text()) if ok else proc


def test_rows_count_keys_bytes_and_build_time_of_what_rae_searches_and_other_settings_are_refused(tmp_path):
    data, _, _ = small_project(tmp_path)
    report = run_scale(tmp_path, "1/full/none,0.5/kmeans/none,0/random/none,1/full/sq8-m12")
    rows = report["rows"]
    assert report["command"].startswith("python bench/memory_budget.py scale --dataset")
    assert [(r["method"], r["keep"], r["compression"], r["keys"]) for r in rows] == [
        ("full", 1.0, "none", 80), ("kmeans", 0.5, "none", 50), ("random", 0.0, "none", 20),
        ("full", 1.0, "sq8-m12", 80)]

    index = tmp_path / "work" / "index"
    built = json.loads((index / "built.json").read_text())["build_s"]
    folder_bytes = {key_set: sum(p.stat().st_size for p in (index / key_set).iterdir()) for key_set in built}
    sp.save_npz(tmp_path / "values.npz", sp.load_npz(data / "Y_train.npz"))
    assert rows[0]["bytes"] == sum(folder_bytes.values()) + (tmp_path / "values.npz").stat().st_size
    assert 0 < rows[2]["bytes"] - folder_bytes["labels"] < 2048, "keep 0: the labels' index and an empty memory"
    assert rows[3]["bytes"] < rows[0]["bytes"]
    assert all(r["latency_ms"] > 0 for r in rows)

    index_files = {p: p.stat().st_mtime_ns for p in index.rglob("*")}
    run_scale(tmp_path, "0.5/random/none")
    assert {p: p.stat().st_mtime_ns for p in index.rglob("*")} == index_files, "the index stage is built once"
    assert "built with M 64, efC 100" in run_scale(tmp_path, "1/full/none", "--M", "16", ok=False).stderr

    # the build time counts the index stage's indexes where RAE searches them
    record = index / "built.json"  # times far above the tiny memories' own builds
    record.write_text(json.dumps({**json.loads(record.read_text()), "build_s": {"inputs": 1000.0, "labels": 100.0}}))
    rows = run_scale(tmp_path, "1/full/none,0.5/kmeans/none,0/random/none,1/full/sq8-m12,1/full/none/0.5")["rows"]
    counted = [(r["method"], r["compression"], int(r["build_s"] // 100) * 100) for r in rows]
    assert counted == [("full", "none", 1100), ("kmeans", "none", 100), ("random", "none", 100),
                       ("full", "sq8-m12", 0), ("full+prototypes0.5", "none", 1000)]


def test_prototypes_memory_counts_its_own_labels_index_and_needs_no_index_stage(tmp_path):
    data, _, _ = small_project(tmp_path)
    report = run_scale(tmp_path, "0.5/kmeans-labels/none/0.5")
    [row] = report["rows"]
    assert (row["method"], row["keep"], row["keys"]) == ("kmeans-labels+prototypes0.5", 0.5, 50)
    assert not (tmp_path / "work" / "index").exists(), "RAE searches only the memory's own two indexes"
    memory = tmp_path / "work" / "memory_0.5_kmeans-labels_none_0.5"
    own = sum(p.stat().st_size for key_set in ("inputs", "labels") for p in (memory / key_set).iterdir())
    assert row["bytes"] == own + (memory / "values.npz").stat().st_size

    appended = run_scale(tmp_path, "1/full/none", "--append")
    assert [r["method"] for r in appended["rows"]] == ["kmeans-labels+prototypes0.5", "full"]
    assert appended["command"].count("python bench/memory_budget.py scale") == 2
    replaced = run_scale(tmp_path, "1/full/none", "--append")
    assert [r["method"] for r in replaced["rows"]] == ["kmeans-labels+prototypes0.5", "full"], \
        "measured again: replaced"
