"""The byte formula against the files hnswlib really writes."""

import re

import numpy as np
import pytest

from raexmc.memory.hnsw import build_hnsw, hnsw_disk_bytes, hnsw_resident_bytes
from raexmc.memory.indexes import build_memory_indexes


@pytest.mark.parametrize(("count", "dim", "M"), [(4000, 16, 8), (3000, 48, 32)])
def test_disk_bytes_match_the_saved_file(tmp_path, count, dim, M):
    keys = np.random.default_rng(0).standard_normal((count, dim)).astype(np.float32)
    index = build_hnsw(keys, M=M, ef_construction=40, progress=False)
    path = tmp_path / "hnsw.bin"
    index.graph.save_index(str(path))
    # The upper levels are random, so the formula holds on average: within 1% at these sizes.
    assert hnsw_disk_bytes(count, dim, M) == pytest.approx(path.stat().st_size, rel=0.01)


def test_loaded_index_costs_more_than_its_file():
    # The level-0 block alone: count x (vector + 2M links + count + label).
    count, dim, M = 1000, 32, 16
    assert hnsw_resident_bytes(count, dim, M) > count * (4 * dim + 8 * M + 4 + 8)


def test_index_stage_says_the_bytes_it_will_write(tmp_path, capsys):
    rng = np.random.default_rng(1)
    for split, count in (("train", 3000), ("labels", 2000)):
        np.save(tmp_path / f"{split}.npy", rng.standard_normal((count, 24)).astype(np.float32))
    build_memory_indexes(tmp_path, tmp_path / "index", "hnsw", M=8, ef_construction=40, progress=False)
    said = capsys.readouterr().out
    for key_set, count in (("inputs", 3000), ("labels", 2000)):
        written = (tmp_path / "index" / key_set / "hnsw.bin").stat().st_size
        megabytes = float(re.search(rf"{key_set}: {count:,} keys x 24 dims, M=8: ([0-9.,]+) MB on disk", said)[1])
        assert megabytes == pytest.approx(written / 1e6, rel=0.01)
