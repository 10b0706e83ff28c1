"""Another run's per-instance results, by path or by MLflow run id, on a real SQLite store."""

from __future__ import annotations

import numpy as np
import pytest

from raexmc.errors import DataError
from raexmc.evaluation.significance import PER_INSTANCE_ARTIFACT, load_per_instance
from raexmc.pipeline.compare import local_copy
from raexmc.pipeline.tracking.run import stage_run
from test_tracking import project  # noqa: F401  (the fixture: a DVC project with params.yaml)


def test_a_path_is_used_as_it_is_and_a_run_id_fetches_what_the_evaluate_stage_logged(project):
    saved = project / "eval" / "per_instance.npz"
    saved.parent.mkdir()
    np.savez_compressed(saved, **{"rae/P@1": np.array([1.0, 0.0]), "knn/P@1": np.array([0.0, 0.0])})
    with stage_run("evaluate") as run:
        run.artifact(saved)
    assert local_copy(saved, PER_INSTANCE_ARTIFACT) == saved
    fetched = local_copy(run.run_id, PER_INSTANCE_ARTIFACT)
    assert fetched != saved and fetched.read_bytes() == saved.read_bytes()
    assert load_per_instance(fetched)["rae/P@1"].tolist() == [1.0, 0.0]


def test_an_unknown_run_is_one_data_error(project):
    with pytest.raises(DataError, match="no-such-run"):
        local_copy("no-such-run", PER_INSTANCE_ARTIFACT)
