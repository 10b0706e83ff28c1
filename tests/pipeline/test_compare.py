"""Another run's per-instance results, by path or by MLflow run id, on a real SQLite store."""

from __future__ import annotations

import numpy as np
import pytest

from raexmc.errors import DataError
from raexmc.evaluation.significance import PER_INSTANCE_ARTIFACT, load_per_instance
from raexmc.pipeline.compare import local_copy
from raexmc.pipeline.tracking.run import stage_run


def test_a_path_is_used_as_it_is_a_run_id_fetches_what_evaluate_logged_and_values_not_finite_are_refused(
        project):
    saved = project / "eval" / "per_instance.npz"
    saved.parent.mkdir()
    np.savez_compressed(saved, **{"rae/P@1": np.array([1.0, 0.0]), "knn/P@1": np.array([0.0, 0.0])})
    with stage_run("evaluate") as run:
        run.artifact(saved)
    assert local_copy(saved, PER_INSTANCE_ARTIFACT) == saved
    fetched = local_copy(run.run_id, PER_INSTANCE_ARTIFACT)
    assert fetched != saved and fetched.read_bytes() == saved.read_bytes()
    assert load_per_instance(fetched)["rae/P@1"].tolist() == [1.0, 0.0]
    np.savez(saved, **{"rae/P@1": np.array([1.0, np.nan]), "knn/P@1": np.array([0.0, 1.0])})
    with pytest.raises(DataError, match=r"per_instance.npz:rae/P@1: per-instance 'rae/P@1' is not a row of finite"):
        load_per_instance(saved)
    # an unknown run or a missing path is one DataError
    for source, line in (("0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdef: cannot fetch"),
                         ("other/per_instance.npz", "other/per_instance.npz: neither an existing file nor an MLflow")):
        with pytest.raises(DataError, match=line):
            local_copy(source, PER_INSTANCE_ARTIFACT)

