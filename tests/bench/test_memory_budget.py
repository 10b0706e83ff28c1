"""bench/memory_budget.py on a small made-up project: the issue's row format, every budget and method, the
bytes as the files evaluate and predict load, and the labels-alone memory scored by hand."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import scipy.sparse as sp

from raexmc.memory.indexes import build_memory_indexes
from tests.helpers import REPO, selection_record
from tests.helpers import small_project as made_up_project

COLUMNS = ["dataset", "mode", "method", "keep", "compression", "bytes", "P@1", "P@5", "R@100", "latency_ms"]


def small_project(root):
    """helpers.small_project at 60 inputs and 10 queries, with the index stage's indexes and the tune stage's choice."""
    data, embeddings = made_up_project(root, n_train=60, n_test=10)
    artifacts = embeddings.parent
    build_memory_indexes(embeddings, artifacts / "index", "hnsw", M=64, ef_construction=100)
    (artifacts / "tune").mkdir()
    (artifacts / "tune" / "selection.json").write_text(json.dumps(selection_record()))
    return data, artifacts, sp.load_npz(data / "Y_test.npz")


def nearest_label_p1(artifacts, Y_test) -> float:
    """P@1 (in points, 2 decimals) of ranking each test input's nearest label first, by brute force."""
    embeddings = artifacts / "embeddings"
    nearest = np.argmax(np.load(embeddings / "test.npy") @ np.load(embeddings / "labels.npy").T, axis=1)
    has_labels = np.diff(Y_test.indptr) > 0
    return round(100 * float(np.mean(Y_test.toarray()[np.arange(10), nearest][has_labels] > 0)), 2)


def run_bench(root, *args, out="bench/results/memory_budget_tiny.json", code=0):
    proc = subprocess.run([sys.executable, str(REPO / "bench/memory_budget.py"), "--root", str(root), "--name", "tiny",
                           "--params", str(REPO / "params.yaml"), *args], cwd=root, capture_output=True, text=True)
    assert proc.returncode == code, proc.stderr
    return json.loads((root / out).read_text()) if code == 0 else proc


def test_rows_in_the_issues_format_with_bytes_as_loaded(tmp_path):
    data, artifacts, Y_test = small_project(tmp_path)
    report = run_bench(tmp_path, "--keeps", "1,0.5,0")
    assert report["command"]["zero-shot"].startswith("python bench/memory_budget.py --root")
    rows = report["rows"]
    assert all(list(row) == COLUMNS for row in rows)
    assert [(r["method"], r["keep"]) for r in rows] == [
        ("full", 1.0), ("random", 0.5), ("kmeans", 0.5), ("kmeans+prior", 0.5), ("kmeans-labels", 0.5),
        ("kmeans-labels+prior", 0.5), ("random", 0.0), ("kmeans", 0.0), ("kmeans-labels", 0.0)]
    assert {r["mode"] for r in rows} == {"zero-shot"} and {r["compression"] for r in rows} == {"none"}

    labels_bytes = sum(p.stat().st_size for p in (artifacts / "index" / "labels").iterdir())
    inputs_bytes = sum(p.stat().st_size for p in (artifacts / "index" / "inputs").iterdir())
    Y_train = sp.load_npz(data / "Y_train.npz")
    sp.save_npz(tmp_path / "values.npz", Y_train)
    assert rows[0]["bytes"] == labels_bytes + inputs_bytes + (tmp_path / "values.npz").stat().st_size
    assert rows[-1]["bytes"] == rows[-2]["bytes"]
    assert 0 < rows[-1]["bytes"] - labels_bytes < 2048, "keep 0: the labels' index, an empty memory's meta and values"
    assert labels_bytes > 20 * (4 * 8 + 8 * 64 + 20) - 100, "hnswlib: about 4d + 8M + 20 bytes per key"
    assert rows[0]["bytes"] > rows[2]["bytes"] > rows[-1]["bytes"]

    # keep 0: the labels alone; with λ = 0.5 RAE ranks as the nearest label does
    assert rows[-1]["P@1"] == rows[-2]["P@1"] == nearest_label_p1(artifacts, Y_test)


def test_a_run_replaces_its_modes_rows_and_keeps_the_others(tmp_path):
    small_project(tmp_path)
    zero_shot = run_bench(tmp_path, "--keeps", "1,0", "--methods", "random,kmeans")["rows"]
    both = run_bench(tmp_path, "--keeps", "1", "--mode", "fine-tuned")
    assert both["rows"][:len(zero_shot)] == zero_shot
    assert [(r["mode"], r["keep"]) for r in both["rows"][len(zero_shot):]] == [("fine-tuned", 1.0)]
    assert set(both["command"]) == {"zero-shot", "fine-tuned"}
    again = run_bench(tmp_path, "--keeps", "0", "--methods", "random,kmeans")
    assert [(r["mode"], r["keep"]) for r in again["rows"]] == [("fine-tuned", 1.0)] + [("zero-shot", 0.0)] * 2


def test_an_appended_run_adds_only_the_variants_it_names(tmp_path):
    small_project(tmp_path)
    first = run_bench(tmp_path, "--keeps", "1,0", "--methods", "random,kmeans")
    appended = run_bench(tmp_path, "--keeps", "0.5", "--methods", "random,kmeans", "--compressions", "sq8",
                         "--append")
    assert appended["rows"][:len(first["rows"])] == first["rows"]
    assert [(r["method"], r["keep"], r["compression"]) for r in appended["rows"][len(first["rows"]):]] == [
        ("random", 0.5, "sq8"), ("kmeans", 0.5, "sq8")], "only the compression named: no uncompressed twin, no prior"
    command = appended["command"]["zero-shot"]
    assert command.startswith(first["command"]["zero-shot"] + " && ") and command.endswith("--append")
    assert command.count(" && ") == 1, "the file is written after every row, the command chained once"
    again = run_bench(tmp_path, "--keeps", "0", "--methods", "random", "--append")["rows"]
    assert [(r["method"], r["keep"]) for r in again] == [("full", 1.0), ("kmeans", 0.0), ("random", 0.5),
                                                        ("kmeans", 0.5), ("random", 0.0)]


def test_rae_scores_at_the_retrieval_tune_chose(tmp_path):
    """A split retrieval with every key from the labels: RAE at keep 1 ranks as the nearest label does, where the
    joint top-b would hold input keys too."""
    data, artifacts, Y_test = small_project(tmp_path)
    (artifacts / "tune" / "selection.json").write_text(json.dumps(selection_record(retrieval="split",
                                                                                 label_share=1.0)))
    [row] = run_bench(tmp_path, "--keeps", "1", "--out", str(tmp_path / "split.json"), out="split.json")["rows"]
    assert not (tmp_path / "bench/results/memory_budget_tiny.json").exists(), "--out names the one file written"
    assert row["P@1"] == nearest_label_p1(artifacts, Y_test)


def test_priors_on_alone_measures_only_the_prior_rows(tmp_path):
    small_project(tmp_path)
    rows = run_bench(tmp_path, "--keeps", "1,0.5", "--methods", "random,kmeans", "--priors", "on")["rows"]
    assert [(r["method"], r["keep"]) for r in rows] == [("kmeans+prior", 0.5)]
    rows = run_bench(tmp_path, "--keeps", "0.5", "--methods", "kmeans", "--priors", "off")["rows"]
    assert [(r["method"], r["keep"]) for r in rows] == [("kmeans", 0.5)]
    assert "--priors 'yes'" in run_bench(tmp_path, "--priors", "yes", code=2).stderr
