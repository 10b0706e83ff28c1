"""The dataset catalogue is a folder of files beside params.yaml, one per dataset: the download stage depends on the
chosen one alone, `dvc exp show` shows that one only, and a bad or missing entry is one line naming its file."""

from __future__ import annotations

import json

import pytest

from raexmc.data.catalogue import catalogue, catalogue_dir, dataset_spec
from raexmc.data.sources import build_dataset
from raexmc.errors import ConfigError
from raexmc.settings import load_settings, read_mapping, read_params_tree, settings_from
from tests.helpers import REPO, commit_all, dvc, new_project, raexmc, set_dataset, set_params, write_params


def test_the_projects_catalogue_holds_every_source_and_the_chosen_entry_is_read_from_its_file(tmp_path):
    entries = catalogue(catalogue_dir(REPO / "params.yaml"))
    assert load_settings(REPO / "params.yaml").data.name in entries
    assert {"foldoc", "wordnet", "wordnet-hyper", "synthetic-small", "LF-AmazonTitles-1.3M"} <= set(entries)
    assert {entry["source"] for entry in entries.values()} == {"foldoc", "wordnet", "wordnet-hypernyms", "xc-repo",
                                                               "synthetic"}
    assert entries["LF-AmazonTitles-1.3M"] == {"source": "xc-repo", "archive_id": "12zH4mL2RX8iSvH0VCNnd3QxO4DzuHWnK",
                                               "sha256": None}
    set_dataset(tmp_path, "mine", {"source": "local", "path": "/x"})
    set_dataset(tmp_path, "other", {"source": "foldoc"})
    params = write_params(tmp_path, **{"data.name": "mine"})
    assert dataset_spec(load_settings(params), params) == ("mine", {"source": "local", "path": "/x"})


@pytest.mark.parametrize("text, params, line", [
    ("source: local\n", {"data": {"name": "b"}}, "{tmp}/params.yaml:data.name: unknown dataset 'b': no "
                                                  "{tmp}/datasets/b.yaml (known: a); add the file to add the dataset"),
    ("- source\n- local\n", {"data": {"name": "a"}}, "{tmp}/datasets/a.yaml: top level must be a mapping"),
    ("source: [local\n", {"data": {"name": "a"}}, "{tmp}/datasets/a.yaml:2: invalid YAML"),
    ("source: local\n", {"data": {"name": "a"}, "datasets": {"a": {"source": "local"}}},
     "{tmp}/params.yaml:datasets: the dataset catalogue is no longer a section of the params: move each entry to "
     "datasets/<name>.yaml beside it, then delete the section"),
])
def test_a_missing_or_bad_entry_is_one_line_naming_its_file(tmp_path, text, params, line):
    (tmp_path / "datasets").mkdir()
    (tmp_path / "datasets" / "a.yaml").write_text(text)
    tree = read_params_tree(REPO / "params.yaml")
    tree = {**tree, **params, "data": {**tree["data"], **params["data"]}}
    with pytest.raises(ConfigError) as caught:
        dataset_spec(settings_from(tree, tmp_path / "params.yaml"), tmp_path / "params.yaml")
    assert caught.value.one_line().startswith("ConfigError: " + line.format(tmp=tmp_path)), caught.value.one_line()


FOLDOC = read_mapping(REPO / "datasets" / "foldoc.yaml", "dataset entry")
WORDNET = read_mapping(REPO / "datasets" / "wordnet.yaml", "dataset entry")


@pytest.mark.parametrize("entry, key, says", [
    ({"source": "archive"}, "source", "unknown source 'archive'"),
    ({"source": "local", "path": 5}, "path", "'path' must be a path (text), got 5"),
    ({"source": "local"}, "path", "'path' must be a path (text), got None"),
    ({"source": "local", "path": "/x", "layout": "lf"}, "layout", "unknown key 'layout' for a local dataset"),
    ({**FOLDOC, "test_fraction": 1.5}, "test_fraction", "'test_fraction' must be a number in (0, 1), got 1.5"),
    ({**FOLDOC, "test_fraction": 0}, "test_fraction", "'test_fraction' must be a number in (0, 1), got 0"),
    ({**FOLDOC, "test_fraction": "0.2"}, "test_fraction", "'test_fraction' must be a number in (0, 1), got '0.2'"),
    ({**FOLDOC, "seed": "abc"}, "seed", "'seed' must be an integer >= 0, got 'abc'"),
    ({**FOLDOC, "test_fracton": 0.3}, "test_fracton", "unknown key 'test_fracton' for a foldoc dataset"),
    ({**WORDNET, "test_fraction": 1.0}, "test_fraction", "'test_fraction' must be a number in (0, 1), got 1.0"),
])
def test_a_bad_path_or_split_is_one_line_naming_the_key_before_any_download(tmp_path, monkeypatch, entry, key, says):
    """Issue 60, cause 5: `path: 5` and `test_fraction: 1.5` were tracebacks in the download stage, the second
    after fetching the package."""
    monkeypatch.setenv("RAEXMC_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ConfigError) as caught:
        build_dataset("mine", entry, tmp_path / "out", "", debian_mirror="http://127.0.0.1:9/")
    assert caught.value.one_line().startswith(f"ConfigError: datasets/mine.yaml:{key}: {says}")
    assert not [path for path in (tmp_path / "cache").rglob("*") if path.is_file()], "nothing was fetched"


def test_raexmc_datasets_lists_the_files_of_the_catalogue(tmp_path):
    (tmp_path / "params.yaml").write_text("data:\n  name: b\n")
    set_dataset(tmp_path, "b", {"source": "synthetic"})
    set_dataset(tmp_path, "a", {"source": "local", "path": "/x"})
    (tmp_path / "data" / "a").mkdir(parents=True)
    (tmp_path / "data" / "a" / "stats.json").write_text(json.dumps({"N_train": 3, "N_test": 2, "L": 5}))
    proc = raexmc("datasets", "--params", tmp_path / "params.yaml", "--data-dir", tmp_path / "data")
    assert proc.returncode == 0, proc.stderr
    # columns as wide as their longest entry ("synthetic"), two spaces apart
    assert proc.stdout.splitlines() == ["a  local      N_train=3 N_test=2 L=5", "b  synthetic  not built"]


@pytest.mark.slow
def test_download_depends_on_the_chosen_entry_alone(tmp_path, tiny_model):
    """A real `dvc repro download` of the project: another entry, or a comment in the chosen one, leaves it up to
    date; a value of the chosen entry (-S on its file, as the docs say) reruns it; `dvc exp show` has a column per
    value of the chosen entry and none of any other entry or preset. A chosen name with dots works (DVC would
    split a key at them)."""
    repo = new_project(tmp_path, tiny_model)
    entry = read_mapping(repo / "datasets" / "tiny.yaml", "dataset entry")
    set_dataset(repo, "tiny.v1", entry)
    set_params(repo, **{"data.name": "tiny.v1"})
    commit_all(repo, "a dataset name with a dot")
    dvc("repro", "download", cwd=repo)
    commit_all(repo, "downloaded")
    assert json.loads(dvc("status", "download", "--json", cwd=repo).stdout) == {}

    (repo / "datasets" / "foldoc.yaml").write_text("source: foldoc\nseed: 9\n")
    with open(repo / "datasets" / "tiny.v1.yaml", "a") as handle:
        handle.write("# a comment changes no value\n")
    assert json.loads(dvc("status", "download", "--json", cwd=repo).stdout) == {}

    workspace = json.loads(dvc("exp", "show", "--json", cwd=repo).stdout)[0]["data"]["params"]
    assert sorted(workspace) == ["datasets/tiny.v1.yaml", "params.yaml"]
    assert workspace["datasets/tiny.v1.yaml"]["data"] == entry
    assert not {"datasets", "presets"} & set(workspace["params.yaml"]["data"])

    dvc("exp", "run", "download", "-S", f"datasets/tiny.v1.yaml:path={entry['path']}/", cwd=repo)
    lock = read_mapping(repo / "dvc.lock", "lock file")["stages"]["download"]["params"]
    assert lock["datasets/tiny.v1.yaml"] == {**entry, "path": entry["path"] + "/"}
    assert lock["params.yaml"]["data.name"] == "tiny.v1"
