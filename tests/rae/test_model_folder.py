"""A damaged model folder is refused at load in one line naming the file, also past a manifest written again over
bad contents; `raexmc serve` refuses a damaged registered model at start-up."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from raexmc.data.dataset import Text
from raexmc.data.label_records import write_label_records
from raexmc.encoder.model import load_tokenizer
from raexmc.encoder.text_encoder import TextEncoder
from raexmc.errors import DataError
from raexmc.memory.hnsw import build_hnsw
from raexmc.memory.persistence import save_index
from raexmc.rae.model import RaeModel
from test_predictor import logged_predictor
from tests.helpers import free_port, peak_rss_of, raexmc, reseal, write_params

BACKENDS = ("hnsw", "exact")


@pytest.fixture
def copy_of(pipelines, tmp_path):
    return lambda backend: pipelines(tmp_path, backend) / "predictor"


def files_of(folder: Path) -> list[str]:
    return sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file())


def refusal(folder: Path) -> str:
    with pytest.raises(DataError) as error:
        RaeModel.load(folder)
    line = error.value.one_line()
    assert "\n" not in line and line.endswith("rerun the package stage"), line
    return line


def cut_short(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])


def one_byte_changed(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def nan_floats(path: Path) -> bool:
    """Write NaN over the floats of `path` where it is an array file of floats; whether it is one."""
    if path.suffix == ".npz":
        values = sp.load_npz(path)
        values.data[:] = np.nan
        sp.save_npz(path, values)
    elif path.suffix == ".npy" and np.load(path).dtype.kind == "f":
        np.save(path, np.full_like(np.load(path), np.nan))
    elif path.suffix == ".safetensors":
        from safetensors.numpy import load_file, save_file

        tensors = load_file(path)
        first = sorted(tensors)[0]
        save_file({**tensors, first: np.full_like(tensors[first], np.nan)}, path)
    else:
        return False
    return True


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_damaged_file_is_refused_naming_it(copy_of, backend):
    """Every file, every damage: one line naming the file (or the part's folder); the untouched folder loads."""
    folder = copy_of(backend)
    intact = {name: (folder / name).read_bytes() for name in files_of(folder)}
    assert {"manifest.json", "values.npz", "encoder/model.safetensors", "label_records.jsonl"} <= set(intact)
    assert RaeModel.load(folder).predict(["perl"], k=1)[0][0], "the untouched folder answers"
    floats = 0
    for name in intact:
        path = folder / name
        for damage in (Path.unlink, cut_short, one_byte_changed, nan_floats):
            if damage(path) is False:
                continue
            floats += damage is nan_floats
            line = refusal(folder)
            assert line.startswith(f"DataError: {path}: "), (name, damage.__name__, line)
            path.write_bytes(intact[name])
    assert floats == (2 if backend == "hnsw" else 4)  # values, weights (and the exact indexes' keys)
    shutil.rmtree(folder / "encoder")
    assert refusal(folder).startswith(f"DataError: {folder / 'encoder'}: missing (manifest.json lists 7 files")


def test_a_file_added_or_a_manifest_edited_in_place_is_refused_naming_it(copy_of):
    """An unlisted keys.npy beside an HNSW graph, and a manifest whose listed sha256 was changed, are refused."""
    folder = copy_of("hnsw")
    added = folder / "inputs" / "keys.npy"
    np.save(added, np.zeros((4, 32), dtype=np.float32))
    assert refusal(folder) == (f"DataError: {added}: not in manifest.json: added since the folder was written: "
                               "rerun the package stage")
    added.unlink()
    manifest = folder / "manifest.json"
    written = json.loads(manifest.read_text())
    digest = written["files"]["values.npz"]["sha256"]
    written["files"]["values.npz"]["sha256"] = ("0" if digest[0] != "0" else "1") + digest[1:]
    manifest.write_text(json.dumps(written))
    assert refusal(folder) == (f"DataError: {manifest}: its contents are not those it was written with (its "
                               "sha256): rerun the package stage")


@pytest.mark.parametrize(("part", "gone"), [("labels", ["label_records.jsonl"]),
                                            ("labels", ["label_records.jsonl", "label_offsets.npy"]),
                                            ("search", ["inputs", "labels"]), ("search", ["labels"]),
                                            ("encoder", ["encoder/tokenizer.json", "encoder/tokenizer_config.json"]),
                                            ("encoder", ["encoder"])])
def test_a_folder_without_a_part_is_refused_even_where_its_manifest_was_written_again(copy_of, part, gone):
    """Past the manifest (written again for what is left): a part's files are each required (a search, both
    indexes, the tokenizer files)."""
    folder = copy_of("hnsw")
    for name in gone:
        (shutil.rmtree if (folder / name).is_dir() else Path.unlink)(folder / name)
    reseal(folder)
    line = refusal(folder)
    first_needed = {"labels": "label_records.jsonl", "search": f"{gone[0]}/meta.json",
                    "encoder": "encoder/config.json" if gone == ["encoder"] else "encoder/tokenizer.json"}[part]
    assert line.startswith(f"DataError: {folder / first_needed}: missing, and not in manifest.json"), line


def fill_values(folder: Path, fill: float) -> None:
    values = sp.load_npz(folder / "values.npz")
    values.data[:] = fill
    sp.save_npz(folder / "values.npz", values)


def six_label_records(folder: Path, _) -> None:
    write_label_records(folder, [Text(f"l{row}", f"label {row}", "") for row in range(6)])


def nan_last_key(folder: Path, key_set: str) -> None:
    keys = np.load(folder / key_set / "keys.npy")
    keys[-1, 0] = np.nan
    np.save(folder / key_set / "keys.npy", keys)


def keys_16_wide(folder: Path, key_set: str) -> None:
    keys = np.random.default_rng(0).normal(size=(json.loads((folder / key_set / "meta.json").read_text())["count"], 16))
    shutil.rmtree(folder / key_set)
    save_index(build_hnsw((keys / np.linalg.norm(keys, axis=1, keepdims=True)).astype(np.float32), M=8,
                          ef_construction=50, threads=1, progress=False), folder / key_set)


def a_token_more(folder: Path, _) -> None:
    tokenizer = load_tokenizer(str(folder / "encoder"))
    tokenizer.add_tokens(["zzznotinthevocabulary"])
    tokenizer.save_pretrained(folder / "encoder")


WIDTH, RERUN = ": holds keys of dimension 16, the encoder's vectors have 32", ": rerun the package stage"


@pytest.mark.parametrize(("backend", "damage", "arg", "file", "error"), [
    ("hnsw", fill_values, np.nan, "values.npz", ": holds NaN or infinite values"),
    ("hnsw", fill_values, np.inf, "values.npz", ": holds NaN or infinite values"),
    ("hnsw", fill_values, -1e6, "values.npz", ": holds negative values (a relevance is >= 0, found -1e+06)"),
    ("hnsw", six_label_records, None, "label_records.jsonl", ": holds 6 labels, values.npz has 5"),
    ("exact", nan_last_key, "inputs", "inputs/keys.npy", ":row 3: this key holds NaN or infinite values"),
    ("exact", nan_last_key, "labels", "labels/keys.npy", ":row 4: this key holds NaN or infinite values"),
    ("hnsw", keys_16_wide, "inputs", "inputs", WIDTH), ("hnsw", keys_16_wide, "labels", "labels", WIDTH),
    ("hnsw", a_token_more, None, "encoder/tokenizer.json", ": a tokenizer of 30,523 tokens for an encoder of "
     "vocab_size 30,522 (its config.json): not this encoder's tokenizer: rerun the stage that writes it")])
def test_bad_contents_under_a_manifest_written_again_are_refused_naming_their_file(copy_of, backend, damage, arg,
                                                                                   file, error):
    """Values NaN or out of range, and index widths other than the encoder's, are refused at load naming the file."""
    folder = copy_of(backend)
    damage(folder, arg)
    reseal(folder)
    with pytest.raises(DataError) as refused:
        RaeModel.load(folder)
    assert refused.value.one_line() == f"DataError: {folder / file}{error}" + ("" if "rerun" in error else RERUN)


def test_an_encoder_folder_without_tokenizer_files_is_refused(tiny_model, tmp_path):
    """The train stage's folder too (no manifest there): a stand-in tokenizer of 5 tokens is refused."""
    folder = Path(shutil.copytree(tiny_model, tmp_path / "model"))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).unlink()
    with pytest.raises(DataError, match=r"a tokenizer of \d tokens for an encoder of vocab_size 30,522"):
        TextEncoder.load(folder, "cpu", "fp32", 16, stage_output=True)


PREDICT_ONE = """
import sys
from raexmc.rae.model import RaeModel
RaeModel.load(sys.argv[1]).predict(["python unix compiler " * int(sys.argv[2])], k=3)
"""


def test_a_10_mb_query_costs_no_more_memory_than_a_short_one(copy_of, tmp_path):
    """The tokenizer never sees more than tokenize.input_max_len tokens' worth of characters."""
    folder = copy_of("exact")
    short, huge = (peak_rss_of([sys.executable, "-c", PREDICT_ONE, str(folder), str(repeats)], tmp_path)
                   / 2**20 for repeats in (1, 500_000))  # 21 characters and 10.5 MB
    assert huge - short < 50, f"peak RSS {short:.0f} MiB for a short query, {huge:.0f} MiB for a 10 MB one"


@pytest.mark.slow
def test_raexmc_serve_refuses_a_damaged_registered_model_at_start_in_one_line(copy_of, tmp_path):
    """One changed byte in the logged copy stops the server before it listens: one line naming the file, exit 2."""
    logged_predictor(copy_of("hnsw").parent, tmp_path)
    [manifest] = (tmp_path / "mlartifacts").rglob("manifest.json")
    one_byte_changed(manifest.parent / "values.npz")
    write_params(tmp_path, **{"data.name": "tiny"})
    proc = raexmc("serve", "--params", tmp_path / "params.yaml", "--port", free_port())
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (f"DataError: {manifest.parent / 'values.npz'}: its sha256 is "
                                                    "not manifest.json's: changed since the folder was written: rerun "
                                                    "the package stage"), proc.stderr
