"""PSP@k's (A, B) come from a table of the standard XMC datasets by whole name, never from a word in the name;
an unknown dataset gets the default pair and says so; evaluate.propensity overrides; the evaluate stage records
the pair it used in metrics.json and the MLflow run."""

from __future__ import annotations

import json

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from raexmc.data.dataset import Dataset
from raexmc.data.sources import build_dataset
from raexmc.evaluation.propensity import chosen_propensity, table_propensity
from raexmc.memory.indexes import build_memory_indexes
from raexmc.memory.input_memory import MemorySettings, build_input_memory
from raexmc.memory.keys_values import training_values
from raexmc.settings import read_params_tree, settings_from
from tests.helpers import REPO, made_up_predictor, make_lf_folder, write_params
from tune_helpers import stage_ok

# Typed in from the sources, not from the table: pyxclib's documented pairs (Amazon 0.6/2.6, Wikipedia 0.5/0.4,
# else 0.55/1.5), pyxclib issue 7 (AmazonCat-13K 0.55/1.5), and the pairs the Extreme Classification
# Repository's own code (deepxml, DECAF, ECLARE) and napkinXC use per dataset.
PAIRS = [("EURLex-4K", 0.55, 1.5), ("AmazonCat-13K", 0.55, 1.5), ("Wiki10-31K", 0.55, 1.5),
         ("WikiLSHTC-325K", 0.5, 0.4), ("Wikipedia-500K", 0.5, 0.4), ("Amazon-670K", 0.6, 2.6),
         ("Amazon-3M", 0.6, 2.6), ("LF-AmazonTitles-131K", 0.6, 2.6), ("LF-Amazon-131K", 0.6, 2.6),
         ("LF-AmazonTitles-1.3M", 0.6, 2.6), ("LF-WikiSeeAlso-320K", 0.55, 1.5),
         ("LF-WikiSeeAlsoTitles-320K", 0.55, 1.5), ("LF-Wikipedia-500K", 0.5, 0.4), ("LF-WikiTitles-500K", 0.5, 0.4)]


@pytest.mark.parametrize(("name", "A", "B"), PAIRS)
def test_each_standard_dataset_has_its_sourced_pair(name, A, B):
    chosen = table_propensity([name])
    assert chosen.ab == (A, B)
    assert (chosen.source, chosen.line()) == (f"table: {name}", f"PSP@k: A={A}, B={B} ({name} in the propensity table)")


@pytest.mark.parametrize(("names", "ab"), [
    (["lf-amazontitles-131k"], (0.6, 2.6)),  # a name matches whole, letter case aside
    *(([name], (0.55, 1.5)) for name in ("AmazonCat-13K-v2", "my-amazon-data", "wikipedia", "LF-AmazonTitles")),
    (["mydata", "LF-Wikipedia-500K"], (0.5, 0.4)),  # a `local` dataset: its catalogue name, then its folder's
    (["LF-Wikipedia-500K", "Amazon-670K"], (0.5, 0.4)), (["Amazon-670K", "LF-Wikipedia-500K"], (0.6, 2.6))])
def test_a_name_matches_whole_never_by_a_word_and_the_first_known_one_wins(names, ab):
    assert table_propensity(names).ab == ab


def test_an_unknown_dataset_gets_the_default_and_says_so_and_evaluate_propensity_overrides_the_table():
    chosen = table_propensity(["foldoc"])
    assert (chosen.ab, chosen.source) == ((0.55, 1.5), "default")
    assert chosen.line() == ("PSP@k: A=0.55, B=1.5 (the default: 'foldoc' is not in the propensity table; "
                             "set evaluate.propensity: [A, B] to choose)")
    assert "'mydata' or 'Wiki-stuff' is not in" in table_propensity(["mydata", "Wiki-stuff"]).line()
    chosen = chosen_propensity(propensity_setting([0.6, 2]), ["LF-Wikipedia-500K"])  # evaluate.propensity overrides
    assert (chosen.ab, chosen.source) == ((0.6, 2.0), "evaluate.propensity")
    assert chosen_propensity(propensity_setting("auto"), ["LF-Wikipedia-500K"]).ab == (0.5, 0.4)


def test_a_local_dataset_goes_by_its_source_folder_name(tmp_path, lf_folder):
    build_dataset("mydata", {"source": "local", "path": str(make_lf_folder(tmp_path / "Amazon-670K"))},
                  tmp_path / "data" / "mydata", "")
    assert Dataset(tmp_path / "data" / "mydata").names == ("mydata", "Amazon-670K")
    build_dataset("other", {"source": "local", "path": str(lf_folder)}, tmp_path / "data" / "other", "")
    assert Dataset(tmp_path / "data" / "other").names == ("other", "lf")


def propensity_setting(value: object) -> object:
    """`evaluate.propensity` as the settings loader reads it from the project's params.yaml set to `value`."""
    tree = read_params_tree(REPO / "params.yaml")
    tree["evaluate"]["propensity"] = value
    return settings_from(tree).evaluate.propensity


def evaluate_tiny(tmp_path, lf=None, infer=None, **options):
    """The tune and evaluate stages (with `options`, and params' `infer` section updated by `infer`) on a `local`
    dataset named `tiny` read from the LF folder `lf` (default: tests.helpers' tiny one, written to
    tmp_path/LF-AmazonTitles-131K), random unit embeddings, and HNSW indexes; the evaluate stage's process."""
    lf = lf or make_lf_folder(tmp_path / "LF-AmazonTitles-131K")
    build_dataset("tiny", {"source": "local", "path": str(lf)}, tmp_path / "data" / "tiny", "")
    data = Dataset(tmp_path / "data" / "tiny")
    rng = np.random.default_rng(0)
    (tmp_path / "emb").mkdir()
    for split in ("train", "labels", "test"):
        keys = rng.normal(size=(data.size(split), 8)).astype(np.float32)
        np.save(tmp_path / "emb" / f"{split}.npy", keys / np.linalg.norm(keys, axis=1, keepdims=True))
    build_memory_indexes(tmp_path / "emb", tmp_path / "index", "hnsw", M=16, ef_construction=100, progress=False)
    build_input_memory(np.load(tmp_path / "emb" / "train.npy"), training_values(data.label_matrix("train")),
                       MemorySettings(1.0, "kmeans", False, 0), tmp_path / "memory", "hnsw", M=16, ef_construction=100)
    infer = {"b": 4, "b_sweep": [2, 4], "val_fraction": 0.25, **(infer or {})}
    params = write_params(tmp_path, **{f"infer.{key}": value for key, value in infer.items()})
    stage_ok(tmp_path, params, "tune", "data/tiny", embeddings=tmp_path / "emb", out=tmp_path / "tune")
    predictor = made_up_predictor(tmp_path / "predictor", tmp_path / "data" / "tiny", tmp_path / "emb",
                                  tmp_path / "index", tmp_path / "memory", tmp_path / "tune", params)
    return stage_ok(tmp_path, params, "evaluate", "data/tiny", embeddings=tmp_path / "emb", index=tmp_path / "index",
                    tune=tmp_path / "tune", predictor=predictor, out=tmp_path / "eval", **options)


@pytest.mark.slow  # several stage or torchrun processes: CI's second step
def test_the_evaluate_stage_records_the_pair_it_used(tmp_path):
    """A `local` dataset named `tiny` read from a folder named LF-AmazonTitles-131K: the Amazon pair, said on
    stderr, written to metrics.json and logged to the MLflow run."""
    proc = evaluate_tiny(tmp_path)
    said = "PSP@k: A=0.6, B=2.6 (LF-AmazonTitles-131K in the propensity table)"
    assert said in proc.stderr.splitlines()
    recorded = json.loads((tmp_path / "eval" / "metrics.json").read_text())["propensity"]
    assert recorded == {"A": 0.6, "B": 2.6, "source": "table: LF-AmazonTitles-131K"}
    client = MlflowClient()
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert {k: run.data.params[f"propensity.{k}"] for k in ("A", "B", "source")} == {
        "A": "0.6", "B": "2.6", "source": "table: LF-AmazonTitles-131K"}
