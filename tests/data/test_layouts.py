"""Local datasets in the LF and NGAME layouts, and every kind of bad input they can hold."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from raexmc.data.dataset import Dataset
from raexmc.data.sources import build_dataset
from raexmc.errors import DataError
from tests.helpers import LABELS, TEST, TRAIN, write_jsonl_gz


def build(folder, out):
    return build_dataset("tiny", {"source": "local", "path": str(folder)}, out, xc_repo_url="")


def edit(folder, files: dict):
    """Each file of `folder` replaced: records (gzipped JSON lines), bytes (gzipped where the name says), text, or
    None (removed)."""
    for name, content in files.items():
        path = folder / name
        if content is None:
            path.unlink()
        elif isinstance(content, list):
            write_jsonl_gz(path, content)
        elif isinstance(content, bytes):
            with gzip.open(path, "wb") as handle:
                handle.write(content)
        else:
            path.write_text(content)
    return folder


@pytest.mark.parametrize("layout", ["lf_folder", "ngame_folder"])
def test_local_layouts_give_the_same_matrices(layout, request, tmp_path):
    stats = build(request.getfixturevalue(layout), tmp_path / "out")
    dataset = Dataset(tmp_path / "out")
    assert stats == dataset.stats
    assert (stats["N_train"], stats["N_test"], stats["L"]) == (4, 2, 5)
    Y = dataset.label_matrix("train")
    assert Y[1, 2] == pytest.approx(0.5, abs=1e-9) and Y[1, 1] == 1.0 and Y.nnz == 7
    assert dataset.label_matrix("test").toarray().tolist() == [[1, 0, 0, 0, 0], [0, 0, 1, 1, 0]]
    assert dataset.filter_matrix("test").nonzero() == (np.array([1]), np.array([3]))
    assert dataset.filter_matrix("train").nnz == 0
    assert [t.title for t in dataset.texts("labels")] == [t for _, t, _ in LABELS]
    assert [t.title for t in dataset.texts("test")] == [t for _, t, _, _, _ in TEST]
    # training frequencies: l0 1, l1 1, l2 2, l3 1, l4 2 -> all xtail; test uses l0, l2, l3 (all seen)
    assert stats["labels_per_segment"] == {"head": 0, "torso": 0, "tail": 0, "xtail": 5, "unseen": 0}
    assert stats["test_labels_unseen_in_train"] == 0
    assert stats["avg_labels_per_input"] == pytest.approx(7 / 4, abs=1e-9)
    assert stats["avg_inputs_per_label"] == pytest.approx(7 / 5, abs=1e-9)


OWN_IDS = [7_340_012_553, "B00X4WHP5E", 12, 9_007_199_254_740_993, "l0"]  # big ints (one past 2**53), strings


def test_lf_keeps_content_uids_of_the_type_the_file_gives_and_numeric_string_and_zero_relevance(lf_folder,
                                                                                                  tmp_path):
    """A label's uid is its id in the user's data: an integer stays an integer (a string "12" would not
    join with the user's 12), however large, and a string stays a string."""
    write_jsonl_gz(lf_folder / "lbl.json.gz", [{"uid": uid, "title": title, "content": content}
                                               for uid, (_, title, content) in zip(OWN_IDS, LABELS)])
    build(edit(lf_folder, {"trn.json.gz": with_relevance(["2.5", 0])}), tmp_path / "out")
    dataset = Dataset(tmp_path / "out")
    first = next(dataset.texts("train"))
    assert (first.uid, first.title, first.content) == TRAIN[0][:3]
    assert [t.uid for t in dataset.texts("labels")] == OWN_IDS
    lines = (tmp_path / "out" / "labels.jsonl").read_text().splitlines()
    assert json.loads(lines[3])["uid"] == 9_007_199_254_740_993 and '"uid": 9007199254740993,' in lines[3]
    assert dataset.label_matrix("train")[1].toarray().tolist() == [[0, 2.5, 0, 0, 0]]


def test_ngame_label_id_is_its_line_in_y_txt_and_a_label_without_a_value_has_relevance_one(ngame_folder, tmp_path):
    """Y.txt has no ids: a label's id is its 0-based line, the number trn_X_Y.txt refers to it by."""
    edit(ngame_folder, {"trn_X_Y.txt": "4 5\n0 4:0.25\n1 2:0.5\n2:1 3\n4\n"})
    build(ngame_folder, tmp_path / "out")
    dataset = Dataset(tmp_path / "out")
    assert [(t.uid, t.title) for t in dataset.texts("labels")] == [
        (0, "python"), (1, "perl"), (2, "unix"), (3, "linux"), (4, "compiler")]
    assert dataset.label_matrix("train").toarray().tolist() == [
        [1.0, 0, 0, 0, 0.25], [0, 1.0, 0.5, 0, 0], [0, 0, 1.0, 1.0, 0], [0, 0, 0, 0, 1.0]]


def with_relevance(relevance) -> list[dict]:
    """TRAIN as LF records, the second (line 2 of trn.json.gz) with `relevance` as its target_rel."""
    rows = [{"uid": u, "title": t, "content": c, "target_ind": i, "target_rel": r} for u, t, c, i, r in TRAIN]
    rows[1]["target_rel"] = relevance
    return rows


def rows(*targets) -> list[dict]:
    return [{"uid": f"u{i}", "title": "x", "target_ind": target} for i, target in enumerate(targets)]


BAD = {  # case: (layout, files replaced, what the one line says)
    "malformed JSON": ("lf", {"tst.json.gz": b'{"uid": "a", "title": "x", "target_ind": [0]}\n{not json\n'},
                       ["tst.json.gz:2", "malformed JSON"]),
    "label out of range": ("lf", {"trn.json.gz": rows([0], [1, 5])}, ["trn.json.gz:2: label index 5 outside [0, 5)"]),
    "label listed twice": ("lf", {"trn.json.gz": rows([0], [1, 3, 1])}, ["trn.json.gz:2: label index 1 listed twice"]),
    "no labels": ("lf", {"lbl.json.gz": []}, ["lbl.json.gz", "no labels"]),
    "invalid UTF-8": ("lf", {"lbl.json.gz": b'{"uid": "a", "title": "ok"}\n{"uid": "b", "title": "\xff\xfe"}\n'},
                      ["lbl.json.gz:2", "invalid UTF-8"]),
    "missing file": ("lf", {"tst.json.gz": None}, ["tst.json.gz", "file not found"]),
    "missing field": ("lf", {"trn.json.gz": [{"uid": "a", "title": "x"}]}, ["trn.json.gz:1", "target_ind"]),
    "bad filter line": ("lf", {"filter_labels_test.txt": "0 1\nzero one\n"}, ["filter_labels_test.txt:2"]),
    "filter out of range": ("lf", {"filter_labels_test.txt": "0 1\n7 1\n"}, ["filter_labels_test.txt:2",
                                                                            "input index 7"]),
    **{f"uid {shown}": ("lf", {"lbl.json.gz": [{"uid": "a", "title": "x"}, {"uid": uid, "title": "y"}]},
                        [f"lbl.json.gz:2: field 'uid' must be a string or an integer, got {shown}"])
       for uid, shown in ((1.5, "1.5"), (None, "None"), (True, "True"), (["a"], "['a']"))},
    **{f"target_rel {shown}": ("lf", {"trn.json.gz": with_relevance([1.0, bad])},
                               [f"trn.json.gz:2: target_rel must be a finite number >= 0, got {shown}"])
       for bad, shown in (("abc", "'abc'"), (float("nan"), "nan"), (float("inf"), "inf"), (-1, "-1"),
                          (None, "None"), (True, "True"), ([1], "[1]"),
                          (1e39, "1e+39"))},  # 1e39 overflows float32: stored as inf
    "line count mismatch": ("ngame", {"trn_X.txt": "a\nb\nc\nd\ne\n"}, ["line count mismatch", "trn_X.txt"]),
    # header "4 5", then 4 rows on lines 2-5; with 3 texts the 4th row, on line 5, is the one without a text
    "mismatch after the header": ("ngame", {"trn_X.txt": "a\nb\nc\n"},
                                  ["trn_X_Y.txt:5: line count mismatch", "after 3 records"]),
    "header labels": ("ngame", {"trn_X_Y.txt": "4 10\n0\n1\n2\n3\n"},
                      ["trn_X_Y.txt:1: header says 10 labels, but Y.txt has 5"]),
    "header rows": ("ngame", {"trn_X_Y.txt": "3 5\n0\n1\n2\n3\n"},
                    ["trn_X_Y.txt:1: header says 3 rows, but the file has 4"]),
    "bad label token": ("ngame", {"tst_X_Y.txt": "2 5\n0:1\n2:1 x:y\n"}, ["tst_X_Y.txt:3", "label:value"]),
    **{f"relevance {token}": ("ngame", {"tst_X_Y.txt": f"2 5\n0:1\n{token} 3:1\n"},
                              [f"tst_X_Y.txt:3: the relevance in '{token}' must be a finite number >= 0, "
                               f"got '{token[2:]}'"])
       for token in ("2:nan", "2:inf", "2:-1", "2:abc", "2:", "2:1e39")},
    "test split without labels": ("ngame", {"tst_X_Y.txt": "2 5\n\n\n"},
                                  ["tst_X_Y.txt: none of the 2 test inputs has a label"]),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_one_line_naming_the_file_and_line_and_leaves_nothing(request, tmp_path, case):
    layout, files, fragments = BAD[case]
    expect_error(edit(request.getfixturevalue(f"{layout}_folder"), files), tmp_path / "out", *fragments)


def expect_error(folder, out, *fragments):
    with pytest.raises(DataError) as info:
        build(folder, out)
    message = str(info.value)
    assert "\n" not in message and all(fragment in message for fragment in fragments), message
    assert not out.exists(), "no partial output may be left behind"
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")], "temp folder left behind"


def test_a_corrupt_gzip_or_no_layout_at_all_is_one_line_and_a_failed_rebuild_keeps_the_previous_output(lf_folder,
                                                                                                        tmp_path):
    build(lf_folder, tmp_path / "kept")
    data = (lf_folder / "trn.json.gz").read_bytes()
    (lf_folder / "trn.json.gz").write_bytes(data[: len(data) // 2])
    expect_error(lf_folder, tmp_path / "out", "trn.json.gz", "corrupt gzip")
    with pytest.raises(DataError):
        build(lf_folder, tmp_path / "kept")
    assert Dataset(tmp_path / "kept").stats["L"] == 5
    (tmp_path / "empty").mkdir()
    expect_error(tmp_path / "empty", tmp_path / "out", "no dataset found")

