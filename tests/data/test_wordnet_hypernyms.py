"""The wordnet-hypernyms source: labels worked out by hand on a tiny wndb hypernym graph, settings
checked before any download, and (slow) the shape of the dataset built from the real package."""

from __future__ import annotations

import json

import pytest

from raexmc.data.catalogue import catalogue, catalogue_dir
from raexmc.data.dataset import Dataset
from raexmc.data.sources import build_dataset
from raexmc.data.wordnet import read_hypernym_corpus, write_hypernym_dataset
from raexmc.errors import ConfigError, DataError
from test_linked_corpora import WORDNET_HEADER
from tests.helpers import REPO

CATALOGUE = catalogue(catalogue_dir(REPO / "params.yaml"))

# The tiny noun graph (hypernym "@" / instance hypernym "@i" edges point up; depth = position on
# a path from "entity"):
#
#   entity(0) ── A(1) ── C(2) ── x1(3)          x3 has two parents, C and D (multiple inheritance)
#      │          ├──── y(2)                    i1 is an instance ("@i") of C
#      │          └──── G(2) ── g1              G also hangs from entity directly: depths 1 and 2
#      ├──── B(1) ── D(2) ── E(3) ── x2(4)
#      └──── G(1)
#
# entity's "~" (hyponym) pointers and y's "#p" (part holonym) pointer to D are not hypernyms; the
# verbs form a chain vroot <- v1 <- v2 <- v3 that must not count (nouns only).
NOUNS = {  # lemma: (offset, [(pointer, target lemma)])
    "entity": (1, [("~", "A"), ("~", "B"), ("~", "G")]),
    "A": (2, [("@", "entity")]),
    "B": (3, [("@", "entity")]),
    "G": (4, [("@", "entity"), ("@", "A")]),
    "C": (5, [("@", "A")]),
    "y": (6, [("@", "A"), ("#p", "D")]),
    "D": (7, [("@", "B")]),
    "x1": (8, [("@", "C")]),
    "E": (9, [("@", "D")]),
    "x3": (10, [("@", "C"), ("@", "D")]),
    "i1": (11, [("@i", "C")]),
    "x2": (12, [("@", "E")]),
    "g1": (13, [("@", "G")]),
}
VERBS = {"vroot": (1, []), "v1": (2, [("@", "vroot")]), "v2": (3, [("@", "v1")]), "v3": (4, [("@", "v2")])}

# Expected labels by hand, for each band [min_depth, max_depth]: input -> its ancestors sitting at
# a depth in the band on some path. Labels are every such ancestor; they are never inputs.
EXPECTED = {
    (1, 1): {"C": {"A"}, "y": {"A"}, "D": {"B"}, "x1": {"A"}, "E": {"B"}, "x3": {"A", "B"}, "i1": {"A"},
             "x2": {"B"}, "g1": {"A", "G"}},
    (1, 2): {"y": {"A"}, "x1": {"A", "C"}, "E": {"B", "D"}, "x3": {"A", "B", "C", "D"}, "i1": {"A", "C"},
             "x2": {"B", "D"}, "g1": {"A", "G"}},
    # E (depth 3) is now a label (of x2); G counts through its depth-2 position under A
    (2, 3): {"x1": {"C"}, "x3": {"C", "D"}, "i1": {"C"}, "x2": {"D", "E"}, "g1": {"G"}},
}


def _synset_line(offset: int, lemma: str, pos: str, pointers: list[tuple[str, str]], table: dict) -> str:
    ptrs = " ".join(f"{symbol} {table[target][0]:08d} {pos} 0000" for symbol, target in pointers)
    frames = " 01 + 02 00" if pos == "v" else ""
    return f"{offset:08d} 03 {pos} 01 {lemma} 0 {len(pointers):03d} {ptrs}{frames} | the gloss of {lemma}  \n"


def write_hypernym_wordnet(folder, nouns=NOUNS):
    for name, pos, table in (("data.noun", "n", nouns), ("data.verb", "v", VERBS), ("data.adj", "a", {}),
                             ("data.adv", "r", {})):
        lines = [_synset_line(offset, lemma, pos, pointers, table) for lemma, (offset, pointers) in table.items()]
        (folder / name).write_text(WORDNET_HEADER + "".join(lines))
    return folder


@pytest.mark.parametrize("band", sorted(EXPECTED))
def test_inputs_are_labelled_by_their_ancestors_in_the_depth_band(tmp_path, band):
    labels, inputs = read_hypernym_corpus(write_hypernym_wordnet(tmp_path), *band)
    expected = EXPECTED[band]
    label_titles = [label.title for label in labels]
    assert label_titles == sorted(set().union(*expected.values()), key=lambda lemma: NOUNS[lemma][0])
    assert {entry.title: {label_titles[i] for i in entry.links} for entry in inputs} == expected
    assert [entry.title for entry in inputs] == sorted(expected, key=lambda lemma: NOUNS[lemma][0])
    first = inputs[0]
    assert first.uid == f"n{NOUNS[first.title][0]:08d}" and first.content == f"the gloss of {first.title}"


def settings(min_depth=1, max_depth=2, seed=5, test_fraction=0.3):
    return {"min_depth": min_depth, "max_depth": max_depth, "seed": seed, "test_fraction": test_fraction}


def test_dataset_folder_holds_the_seeded_split_of_the_inputs(tmp_path):
    folder = write_hypernym_wordnet(tmp_path)
    stats = write_hypernym_dataset(folder, tmp_path / "out", "tiny", {"name": "tiny", **settings()})
    dataset = Dataset(tmp_path / "out")
    label_titles = [t.title for t in dataset.texts("labels")]
    seen = {}
    for split in ("train", "test"):
        Y = dataset.label_matrix(split)
        for row, text in enumerate(dataset.texts(split)):
            seen[text.title] = {label_titles[j] for j in Y[row].indices}
        assert dataset.filter_matrix(split).nnz == 0, "no input is a label, so nothing to filter"
    assert seen == EXPECTED[(1, 2)]
    assert (stats["N_train"], stats["N_test"], stats["L"]) == (5, 2, 5)  # A B C D G; round(7 * 0.3) = 2 test inputs
    assert json.loads((tmp_path / "out" / "source.json").read_text()) == {"name": "tiny", **settings()}
    tests = set()
    for seed in range(8):
        write_hypernym_dataset(folder, tmp_path / f"s{seed}", "tiny", settings(seed=seed))
        tests.add(tuple(t.uid for t in Dataset(tmp_path / f"s{seed}").texts("test")))
    assert len(tests) > 1, "the seed must change the split"


def test_a_band_below_every_synset_fails_naming_min_depth_without_output_and_a_cycle_is_a_data_error(tmp_path):
    folder = write_hypernym_wordnet(tmp_path)
    with pytest.raises(ConfigError, match=r"datasets/tiny.yaml:min_depth: no noun synset has hypernym "
                                          r"ancestors at depths 4..6"):
        write_hypernym_dataset(folder, tmp_path / "out", "tiny", settings(4, 6))
    assert not (tmp_path / "out").exists()
    cyclic = {**NOUNS, "A": (2, [("@", "C")])}  # A -> C -> A
    with pytest.raises(DataError, match=r"data.noun: hypernym pointers form a cycle through synset n0000000[25]"):
        read_hypernym_corpus(write_hypernym_wordnet(tmp_path, cyclic), 1, 2)


@pytest.mark.parametrize("change, key", [
    ({"min_depth": -1}, "min_depth"),
    ({"min_depth": "4"}, "min_depth"),
    ({"max_depth": 3}, "max_depth"),       # below min_depth
    ({"max_depth": 4.5}, "max_depth"),
    ({"seed": True}, "seed"),
    ({"test_fraction": 1.0}, "test_fraction"),
    ({"test_fraction": None}, "test_fraction"),
    ({"depth": 4}, "depth"),               # unknown key
])
def test_bad_settings_fail_before_any_download(tmp_path, change, key):
    # a package that apt cannot have: reaching the download would raise SourceError instead
    spec = {**CATALOGUE["wordnet-hyper"], "package": {"name": "wordnet-base", "version": "0.0-nonexistent"},
            **change}
    with pytest.raises(ConfigError, match=rf"datasets/wordnet-hyper.yaml:{key}: "):
        build_dataset("wordnet-hyper", spec, tmp_path / "out", "")
    assert not (tmp_path / "out").exists()


def test_pinned_package_is_the_wordnet_entrys():
    assert CATALOGUE["wordnet-hyper"]["package"] == CATALOGUE["wordnet"]["package"]


@pytest.mark.slow
def test_wordnet_hyper_from_the_pinned_package_has_few_labels_and_many_inputs(tmp_path):
    stats = build_dataset("wordnet-hyper", CATALOGUE["wordnet-hyper"], tmp_path / "hyper", "")
    # issue 13 item 3: at most a few thousand labels, at least 20k inputs, multi-label
    assert 500 <= stats["L"] <= 5_000
    assert stats["N_train"] + stats["N_test"] >= 20_000
    assert stats["avg_labels_per_input"] >= 1.5 and stats["avg_labels_per_test_input"] >= 1.5
    dataset = Dataset(tmp_path / "hyper")
    label_uids = {t.uid for t in dataset.texts("labels")}
    for split in ("train", "test"):
        assert not label_uids & {t.uid for t in dataset.texts(split)}, "an input is also a label"
    assert all(uid.startswith("n") for uid in label_uids)
    source = json.loads((tmp_path / "hyper" / "source.json").read_text())
    assert source["package"]["md5"] == "e52dcc79abc64fdc50b503a56a61118a"
