"""FOLDOC and WordNet parsing on small hand-written files, and the linked-corpus split."""

from __future__ import annotations

import gzip

import pytest

from raexmc.data.dataset import Dataset
from raexmc.data.foldoc import read_foldoc
from raexmc.data.linked import LinkedEntry, write_linked_corpus
from raexmc.data.wordnet import read_wordnet
from raexmc.errors import DataError

B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def b64(number: int) -> str:
    digits = ""
    while True:
        digits = B64[number % 64] + digits
        number //= 64
        if not number:
            return digits


def write_dictd(folder, entries: list[tuple[list[str], str]]):
    """entries: (index headwords, entry text); returns (index path, dict path)."""
    blob, index = b"", []
    for headwords, text in entries:
        data = text.encode("utf-8")
        index += [f"{h}\t{b64(len(blob))}\t{b64(len(data))}" for h in headwords]
        blob += data
    index.append(f"00-database-short\t{b64(0)}\t{b64(1)}")
    (folder / "foldoc.index").write_text("\n".join(sorted(index)) + "\n", encoding="utf-8")
    with gzip.open(folder / "foldoc.dict.dz", "wb") as handle:
        handle.write(blob)
    return folder / "foldoc.index", folder / "foldoc.dict.dz"


FOLDOC = [
    (["awk"], "awk\n\n   <language> A language for {Unix} text, like {PERL} and {awk}.\n   See {gnu awk} and\n"
              "   {missing entry}, {netlib (http://netlib.org/)}.\n\n   (1995-10-06)\n\n"),
    (["unix", "unix operating system"], "Unix\nUNIX Operating System\n\n   <os> An {operating system}.\n\n"),
    (["perl"], "Perl\n\n   <language> Practical extraction; see {Unix Operating System}.\n\n"),
    (["gawk", "gnu awk"], "gawk\n\n   The {GNU} version of {AWK}.\n\n"),
]


def test_foldoc_links_resolve_through_aliases_content_has_no_markup_and_a_bad_index_or_dictzip_is_named(tmp_path):
    index, dict_path = write_dictd(tmp_path, FOLDOC)
    entries = read_foldoc(index, dict_path)
    titles, by_uid = [e.title for e in entries], {e.uid: e for e in entries}
    assert set(by_uid) == {"awk", "unix", "perl", "gawk"}
    # {Unix} and {PERL} by case, {gnu awk} through an alias; {awk} is a self-link; the dangling
    # {missing entry} and the external {netlib (url)} are dropped
    assert sorted(titles[i] for i in by_uid["awk"].links) == ["Perl", "Unix", "gawk"]
    assert [titles[i] for i in by_uid["perl"].links] == ["Unix"]  # alias spelled in the entry header
    assert [titles[i] for i in by_uid["gawk"].links] == ["awk"]
    assert by_uid["unix"].links == []
    assert (by_uid["awk"].title, by_uid["awk"].content) == (
        "awk", "A language for Unix text, like PERL and awk. See gnu awk and missing entry, netlib.")
    index.write_text(index.read_text() + "broken line without tabs\n")
    with pytest.raises(DataError, match=r"foldoc.index:8: .*headword"):
        read_foldoc(index, dict_path)
    index, dict_path = write_dictd(tmp_path, FOLDOC)
    dict_path.write_bytes(b"not gzip at all")
    with pytest.raises(DataError, match="foldoc.dict.dz.*corrupt"):
        read_foldoc(index, dict_path)


WORDNET_HEADER = "  1 This software and database is being provided to you, the LICENSEE\n"
WORDNET = {
    "data.noun": [
        "00000100 03 n 02 entity 0 thing 0 002 ~ 00000200 n 0000 + 00000300 v 0101 | that which exists",
        "00000200 03 n 01 physical_entity 0 001 @ 00000100 n 0000 | an entity that has physical existence",
    ],
    "data.verb": ["00000300 42 v 01 exist 0 002 $ 00000100 n 0000 + 00000100 n 0101 01 + 02 00 | have existence"],
    "data.adj": ["00000400 00 s 01 real(a) 0 001 & 00000100 n 0000 | being or occurring in fact"],
    "data.adv": [],
}


def write_wordnet(folder):
    for name, lines in WORDNET.items():
        (folder / name).write_text(WORDNET_HEADER + "".join(line + "  \n" for line in lines))
    return folder


def test_wordnet_semantic_pointers_by_default_pointer_symbols_select_types_and_a_malformed_line(tmp_path):
    entries = read_wordnet(write_wordnet(tmp_path))
    by_uid = {e.uid: e for e in entries}
    index = {e.uid: i for i, e in enumerate(entries)}
    assert by_uid["n00000100"].title == "entity, thing"
    assert by_uid["n00000100"].content == "that which exists"
    assert by_uid["a00000400"].title == "real"  # adjective marker removed, satellite filed under adj
    assert by_uid["n00000100"].links == [index["n00000200"]]  # the lexical "+" pointer does not count
    assert by_uid["v00000300"].links == [index["n00000100"]]
    assert by_uid["a00000400"].links == [index["n00000100"]]
    entries = read_wordnet(tmp_path, pointer_symbols={"@"})
    assert [bool(e.links) for e in entries] == [False, True, False, False]
    (tmp_path / "data.verb").write_text(WORDNET_HEADER + "00000300 42 v 01 exist 0 005 $ 00000100 n | gloss\n")
    with pytest.raises(DataError, match=r"data.verb:2: malformed synset"):
        read_wordnet(tmp_path)


def test_split_is_seeded_and_filters_own_label(tmp_path):
    entries = [LinkedEntry(f"e{i}", f"t{i}", "", links=[(i + 1) % 10] if i < 8 else []) for i in range(10)]

    def split(seed, folder):
        write_linked_corpus(tmp_path / folder, entries, {"seed": seed, "test_fraction": 0.25})
        return Dataset(tmp_path / folder)

    a, b = split(3, "a"), split(3, "b")
    assert [x.uid for x in a.texts("test")] == [x.uid for x in b.texts("test")]
    assert (a.size("labels"), a.size("train"), a.size("test")) == (10, 6, 2)
    for name in ("train", "test"):  # each input's own label filtered, its link its label
        own = [int(x.uid[1:]) for x in a.texts(name)]
        assert a.filter_matrix(name).nonzero()[1].tolist() == own
        assert a.label_matrix(name).indices.tolist() == [(i + 1) % 10 for i in own]
    splits = {tuple(x.uid for x in split(seed, f"s{seed}").texts("test")) for seed in range(10)}
    assert len(splits) > 1, "the seed must change the split"
