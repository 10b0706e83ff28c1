"""Local datasets in the LF and NGAME layouts, and every kind of bad input they can hold."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from raexmc.data.dataset import Dataset
from raexmc.data.sources import build_dataset
from raexmc.errors import ConfigError, DataError
from tests.helpers import LABELS, TEST, TRAIN, write_jsonl_gz


def build(folder, out):
    return build_dataset("tiny", {"source": "local", "path": str(folder)}, out, xc_repo_url="")


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


def test_lf_keeps_content_and_uids(lf_folder, tmp_path):
    build(lf_folder, tmp_path / "out")
    first = next(Dataset(tmp_path / "out").texts("train"))
    assert (first.uid, first.title, first.content) == TRAIN[0][:3]


OWN_IDS = [7_340_012_553, "B00X4WHP5E", 12, 9_007_199_254_740_993, "l0"]  # big ints (one past 2**53), strings


def test_lf_label_uids_keep_the_type_the_file_gives(lf_folder, tmp_path):
    """A label's uid is its id in the user's data: an integer stays an integer (a string "12" would not
    join with the user's 12), however large, and a string stays a string."""
    write_jsonl_gz(lf_folder / "lbl.json.gz", [{"uid": uid, "title": title, "content": content}
                                               for uid, (_, title, content) in zip(OWN_IDS, LABELS)])
    build(lf_folder, tmp_path / "out")
    assert [t.uid for t in Dataset(tmp_path / "out").texts("labels")] == OWN_IDS
    lines = (tmp_path / "out" / "labels.jsonl").read_text().splitlines()
    assert json.loads(lines[3])["uid"] == 9_007_199_254_740_993 and '"uid": 9007199254740993,' in lines[3]


@pytest.mark.parametrize(("uid", "shown"), [(1.5, "1.5"), (None, "None"), (True, "True"), (["a"], "['a']")])
def test_lf_uid_that_is_no_string_or_integer_names_the_line(lf_folder, tmp_path, uid, shown):
    write_jsonl_gz(lf_folder / "lbl.json.gz", [{"uid": "a", "title": "x"}, {"uid": uid, "title": "y"}])
    expect_error(lf_folder, tmp_path / "out", "lbl.json.gz:2", f"'uid' must be a string or an integer, got {shown}")


def test_ngame_label_id_is_its_line_in_y_txt(ngame_folder, tmp_path):
    """Y.txt has no ids: a label's id is its 0-based line, the number trn_X_Y.txt refers to it by."""
    build(ngame_folder, tmp_path / "out")
    assert [(t.uid, t.title) for t in Dataset(tmp_path / "out").texts("labels")] == [
        (0, "python"), (1, "perl"), (2, "unix"), (3, "linux"), (4, "compiler")]


def test_stats_count_segments_and_unseen_test_labels(lf_folder, tmp_path):
    stats = build(lf_folder, tmp_path / "out")
    # training frequencies: l0 1, l1 1, l2 2, l3 1, l4 2 -> all xtail; test uses l0, l2, l3 (all seen)
    assert stats["labels_per_segment"] == {"head": 0, "torso": 0, "tail": 0, "xtail": 5, "unseen": 0}
    assert stats["test_labels_unseen_in_train"] == 0
    assert stats["avg_labels_per_input"] == pytest.approx(7 / 4, abs=1e-9)
    assert stats["avg_inputs_per_label"] == pytest.approx(7 / 5, abs=1e-9)


def expect_error(folder, out, *fragments):
    with pytest.raises(DataError) as info:
        build(folder, out)
    message = str(info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    assert not out.exists(), "no partial output may be left behind"
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")], "temp folder left behind"


def test_corrupt_gzip(lf_folder, tmp_path):
    data = (lf_folder / "trn.json.gz").read_bytes()
    (lf_folder / "trn.json.gz").write_bytes(data[: len(data) // 2])
    expect_error(lf_folder, tmp_path / "out", "trn.json.gz", "corrupt gzip")


def test_malformed_json_names_the_line(lf_folder, tmp_path):
    with gzip.open(lf_folder / "tst.json.gz", "wt") as handle:
        handle.write(json.dumps({"uid": "a", "title": "x", "target_ind": [0]}) + "\n{not json\n")
    expect_error(lf_folder, tmp_path / "out", "tst.json.gz:2", "malformed JSON")


def test_label_index_out_of_range(lf_folder, tmp_path):
    write_jsonl_gz(lf_folder / "trn.json.gz", [{"uid": "a", "title": "x", "target_ind": [0]},
                                               {"uid": "b", "title": "y", "target_ind": [1, 5]}])
    expect_error(lf_folder, tmp_path / "out", "trn.json.gz:2", "label index 5 outside [0, 5)")


def test_empty_label_file(lf_folder, tmp_path):
    write_jsonl_gz(lf_folder / "lbl.json.gz", [])
    expect_error(lf_folder, tmp_path / "out", "lbl.json.gz", "no labels")


def test_invalid_utf8(lf_folder, tmp_path):
    with gzip.open(lf_folder / "lbl.json.gz", "wb") as handle:
        handle.write(b'{"uid": "a", "title": "ok"}\n{"uid": "b", "title": "\xff\xfe"}\n')
    expect_error(lf_folder, tmp_path / "out", "lbl.json.gz:2", "invalid UTF-8")


def test_missing_file(lf_folder, tmp_path):
    (lf_folder / "tst.json.gz").unlink()
    expect_error(lf_folder, tmp_path / "out", "tst.json.gz", "file not found")


def test_missing_field(lf_folder, tmp_path):
    write_jsonl_gz(lf_folder / "trn.json.gz", [{"uid": "a", "title": "x"}])
    expect_error(lf_folder, tmp_path / "out", "trn.json.gz:1", "target_ind")


def test_bad_filter_line(lf_folder, tmp_path):
    (lf_folder / "filter_labels_test.txt").write_text("0 1\nzero one\n")
    expect_error(lf_folder, tmp_path / "out", "filter_labels_test.txt:2")


def test_filter_out_of_range(lf_folder, tmp_path):
    (lf_folder / "filter_labels_test.txt").write_text("0 1\n7 1\n")
    expect_error(lf_folder, tmp_path / "out", "filter_labels_test.txt:2", "input index 7")


def test_ngame_line_count_mismatch(ngame_folder, tmp_path):
    (ngame_folder / "trn_X.txt").write_text("a\nb\nc\nd\ne\n")
    expect_error(ngame_folder, tmp_path / "out", "line count mismatch", "trn_X.txt")


def test_ngame_mismatch_names_the_file_line_after_the_header(ngame_folder, tmp_path):
    # trn_X_Y.txt: header "4 5", then 4 rows on lines 2-5; trn_X.txt has only 3 texts, so the
    # 4th row, on line 5 of trn_X_Y.txt, is the one without a text
    (ngame_folder / "trn_X.txt").write_text("a\nb\nc\n")
    expect_error(ngame_folder, tmp_path / "out", "trn_X_Y.txt:5: line count mismatch", "after 3 records")


def ngame_with_header(folder, header, rows=300, labels=593):
    """An NGAME folder with `labels` labels and `rows` training rows whose trn_X_Y.txt starts with `header`."""
    folder.mkdir()
    (folder / "Y.txt").write_text("".join(f"label {j}\n" for j in range(labels)))
    for prefix, count in (("trn", rows), ("tst", 2)):
        (folder / f"{prefix}_X.txt").write_text("".join(f"text {i}\n" for i in range(count)))
        first = header if prefix == "trn" else f"{count} {labels}"
        (folder / f"{prefix}_X_Y.txt").write_text(first + "\n" + "".join(f"{i % labels}:1\n" for i in range(count)))
    return folder


def test_ngame_header_agreeing_with_the_files_builds(tmp_path):
    stats = build(ngame_with_header(tmp_path / "ngame", "300 593"), tmp_path / "out")
    assert (stats["N_train"], stats["L"]) == (300, 593)


def test_ngame_header_label_count_must_match_y_txt(tmp_path):
    folder = ngame_with_header(tmp_path / "ngame", "300 10")
    expect_error(folder, tmp_path / "out", "trn_X_Y.txt:1: header says 10 labels, but Y.txt has 593")


def test_ngame_header_row_count_must_match_the_file(tmp_path):
    folder = ngame_with_header(tmp_path / "ngame", "250 593")
    expect_error(folder, tmp_path / "out", "trn_X_Y.txt:1: header says 250 rows, but the file has 300")


def test_ngame_label_without_a_value_has_relevance_one(ngame_folder, tmp_path):
    (ngame_folder / "trn_X_Y.txt").write_text("4 5\n0 4:0.25\n1 2:0.5\n2:1 3\n4\n")
    build(ngame_folder, tmp_path / "out")
    assert Dataset(tmp_path / "out").label_matrix("train").toarray().tolist() == [
        [1.0, 0, 0, 0, 0.25], [0, 1.0, 0.5, 0, 0], [0, 0, 1.0, 1.0, 0], [0, 0, 0, 0, 1.0]]


def test_ngame_bad_label_token(ngame_folder, tmp_path):
    (ngame_folder / "tst_X_Y.txt").write_text("2 5\n0:1\n2:1 x:y\n")
    expect_error(ngame_folder, tmp_path / "out", "tst_X_Y.txt:3", "label:value")


def lf_with_relevance(folder, relevance):
    """The LF folder with the second training record's target_rel replaced (line 2 of trn.json.gz)."""
    rows = [{"uid": u, "title": t, "content": c, "target_ind": i, "target_rel": r} for u, t, c, i, r in TRAIN]
    rows[1]["target_rel"] = relevance
    write_jsonl_gz(folder / "trn.json.gz", rows)
    return folder


@pytest.mark.parametrize("bad, shown", [("abc", "'abc'"), (float("nan"), "nan"), (float("inf"), "inf"),
                                        (-1, "-1"), (None, "None"), (True, "True"), ([1], "[1]"),
                                        (1e39, "1e+39")])  # 1e39 overflows float32: stored as inf
def test_lf_relevance_must_be_a_finite_number_at_least_0(lf_folder, tmp_path, bad, shown):
    expect_error(lf_with_relevance(lf_folder, [1.0, bad]), tmp_path / "out",
                 f"trn.json.gz:2: target_rel must be a finite number >= 0, got {shown}")


def test_lf_numeric_strings_and_zero_are_relevance_values(lf_folder, tmp_path):
    build(lf_with_relevance(lf_folder, ["2.5", 0]), tmp_path / "out")
    assert Dataset(tmp_path / "out").label_matrix("train")[1].toarray().tolist() == [[0, 2.5, 0, 0, 0]]


@pytest.mark.parametrize("token", ["2:nan", "2:inf", "2:-1", "2:abc", "2:", "2:1e39"])
def test_ngame_relevance_must_be_a_finite_number_at_least_0(ngame_folder, tmp_path, token):
    (ngame_folder / "tst_X_Y.txt").write_text(f"2 5\n0:1\n{token} 3:1\n")
    expect_error(ngame_folder, tmp_path / "out",
                 f"tst_X_Y.txt:3: the relevance in '{token}' must be a finite number >= 0, got '{token[2:]}'")


def test_ngame_test_split_without_labels_names_its_label_file(ngame_folder, tmp_path):
    (ngame_folder / "tst_X_Y.txt").write_text("2 5\n\n\n")
    expect_error(ngame_folder, tmp_path / "out", "tst_X_Y.txt: none of the 2 test inputs has a label")


def test_unknown_layout(tmp_path):
    (tmp_path / "empty").mkdir()
    expect_error(tmp_path / "empty", tmp_path / "out", "no dataset found")


def test_previous_output_survives_a_failed_rebuild(lf_folder, tmp_path):
    out = tmp_path / "out"
    build(lf_folder, out)
    write_jsonl_gz(lf_folder / "lbl.json.gz", [])
    with pytest.raises(DataError):
        build(lf_folder, out)
    assert Dataset(out).stats["L"] == 5


def test_unknown_source_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="unknown source 'ftp'"):
        build_dataset("x", {"source": "ftp"}, tmp_path / "out", "")


def test_a_label_listed_twice_names_the_line(lf_folder, tmp_path):
    write_jsonl_gz(lf_folder / "trn.json.gz", [{"uid": "a", "title": "x", "target_ind": [0]},
                                               {"uid": "b", "title": "y", "target_ind": [1, 3, 1]}])
    expect_error(lf_folder, tmp_path / "out", "trn.json.gz:2", "label index 1 listed twice")
