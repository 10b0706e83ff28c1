"""Plain helpers the tests share: the tiny dataset, running commands and projects, servers on free ports,
brute-force references and their error bounds, and writers killed or starved of disk. Fixtures live in conftest.py
(pytest finds them there); helpers are imported from here (`from tests.helpers import REPO`)."""

from __future__ import annotations

import errno
import gzip
import importlib.util
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from ruamel.yaml import YAML

REPO = Path(__file__).resolve().parents[1]


def load_module(path: Path):
    """A script that is not part of a package (bench/, scripts/), loaded from its file with its folder on sys.path,
    as when it runs (bench/peers scripts find peer_eval there)."""
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


LABELS = [("l0", "python", "a programming language"), ("l1", "perl", "a scripting language"),
          ("l2", "unix", "an operating system"), ("l3", "linux", "a unix-like kernel"),
          ("l4", "compiler", "translates source code")]
TRAIN = [("t0", "cpython", "the reference python implementation", [0, 4], [1.0, 1.0]),
         ("t1", "awk", "text processing language", [1, 2], [1.0, 0.5]),
         ("t2", "gnu", "free unix replacement", [2, 3], [1.0, 1.0]),
         ("t3", "gcc", "the gnu compiler collection", [4], [1.0])]
TEST = [("s0", "jython", "python on the jvm", [0], [1.0]),
        ("s1", "minix", "a small unix", [2, 3], [1.0, 1.0])]
# params.yaml's train keys shrunk to that tiny problem (the training tests' recipe)
TINY_TRAIN = dict(batch_size=4, grad_cache_chunk=0, lr=1e-3, max_steps=6, warmup_steps=1, hnm_steps=3, hnm_topk=3,
                  num_hard_negatives=1, val_fraction=0.25, val_b=10, checkpoint_every=2, embed_batch_size=4)


def reseal(folder: Path) -> None:
    """Write a saved folder's manifest again for the files it holds now, its format and parts kept: a folder that
    a save of a bad model would have written, for the checks of what the manifest cannot vouch for."""
    from raexmc.io import MANIFEST_FILE, write_manifest

    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    (folder / MANIFEST_FILE).unlink()
    write_manifest(folder, {key: value for key, value in manifest.items() if key not in ("files", "sha256")})


def json_edited(name: str, **changes) -> Callable[[Path], None]:
    """An edit of a folder: its JSON object `name` with `changes` merged in."""
    def edit(folder: Path) -> None:
        (folder / name).write_text(json.dumps({**json.loads((folder / name).read_text()), **changes}))
    return edit


def garble_milvus_lite(folder: Path) -> None:
    """The Lite data folder of a Milvus index saved in `folder`, its manifests made invalid JSON."""
    for manifest in (folder / "milvus.db").rglob("manifest.json*"):
        manifest.write_text("{not json")


def write_jsonl_gz(path: Path, records: list[dict]) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")


def make_lf_folder(folder: Path) -> Path:
    """A tiny dataset in the Extreme Classification Repository's LF layout."""
    folder.mkdir(parents=True, exist_ok=True)
    write_jsonl_gz(folder / "lbl.json.gz", [{"uid": u, "title": t, "content": c} for u, t, c in LABELS])
    for name, rows in (("trn.json.gz", TRAIN), ("tst.json.gz", TEST)):
        write_jsonl_gz(folder / name, [{"uid": u, "title": t, "content": c, "target_ind": i, "target_rel": r}
                                       for u, t, c, i, r in rows])
    (folder / "filter_labels_test.txt").write_text("1 3\n")
    return folder


def make_ngame_folder(folder: Path) -> Path:
    """The same tiny dataset in the NGAME text layout (titles only)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Y.txt").write_text("".join(f"{t}\n" for _, t, _ in LABELS))
    for prefix, rows in (("trn", TRAIN), ("tst", TEST)):
        (folder / f"{prefix}_X.txt").write_text("".join(f"{t}\n" for _, t, _, _, _ in rows))
        lines = [" ".join(f"{i}:{r}" for i, r in zip(ids, rels)) for _, _, _, ids, rels in rows]
        (folder / f"{prefix}_X_Y.txt").write_text(f"{len(rows)} {len(LABELS)}\n" + "\n".join(lines) + "\n")
    (folder / "filter_labels_test.txt").write_text("1 3\n")
    return folder


def raexmc(*args, cwd=None, env=None, timeout=300):
    """`python -m raexmc.cli ARGS` (paths as text) in `cwd`, its output captured as text."""
    return subprocess.run([sys.executable, "-m", "raexmc.cli", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def sh(*args, cwd, check=True, env=None):
    env = {**(os.environ if env is None else env),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def dvc(*args, cwd, check=True, env=None):
    return sh(sys.executable, "-m", "dvc", *args, cwd=cwd, check=check, env=env)


def set_in_files(repo: Path, updates: list[tuple[Path, tuple[str, ...], object]]) -> None:
    """Set each (YAML file relative to `repo`, key path, value) of `updates`, keeping the rest of the file (a new
    file starts empty); an empty key path makes the value the whole file. The one writer of the project's
    params and catalogue files in tests."""
    yaml = YAML()
    trees: dict[Path, object] = {}
    for file, keys, value in updates:
        if file not in trees:
            trees[file] = yaml.load(repo / file) if (repo / file).is_file() else {}
        if not keys:
            trees[file] = value
            continue
        node = trees[file]
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
    for file, tree in trees.items():
        (repo / file).parent.mkdir(parents=True, exist_ok=True)
        yaml.dump(tree, repo / file)


def set_params(repo: Path, **updates) -> None:
    """Apply `updates` (dotted keys) to the project's files: `datasets.<name>[.<key>]` to datasets/<name>.yaml,
    `presets.<key>` to presets.yaml, any other key to params.yaml (a name with dots: set_dataset)."""
    routed = []
    for dotted, value in updates.items():
        first, *keys = dotted.split(".")
        if first == "datasets":
            routed.append((Path("datasets") / f"{keys[0]}.yaml", tuple(keys[1:]), value))
        elif first == "presets":
            routed.append((Path("presets.yaml"), tuple(keys), value))
        else:
            routed.append((Path("params.yaml"), (first, *keys), value))
    set_in_files(repo, routed)


def write_params(folder: Path, **updates) -> Path:
    """The project's params.yaml copied into `folder` with `updates` set (set_params: `datasets.<name>` and
    `presets.` keys go to the catalogue files beside it): every stage loads and checks a whole one."""
    shutil.copy(REPO / "params.yaml", folder / "params.yaml")
    set_params(folder, **updates)
    return folder / "params.yaml"


def set_dataset(folder: Path, name: str, entry: dict) -> None:
    """Catalogue entry `name` (dots and all) of the project (or params file's folder) `folder`, whole."""
    set_in_files(folder, [(Path("datasets") / f"{name}.yaml", (), entry)])


def commit_all(repo: Path, message: str) -> None:
    sh("git", "add", "-A", cwd=repo)
    sh("git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message, cwd=repo)


def copy_project_files(repo: Path) -> Path:
    """The checkout's tracked and new (not ignored) files, copied into `repo`."""
    files = sh("git", "ls-files", "-co", "--exclude-standard", cwd=REPO).stdout.split()
    for name in files:
        if (REPO / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, repo / name)
    return repo


def new_project(root: Path, tiny_model: Path) -> Path:
    """The project's tracked and new files, committed in a fresh git repo under `root`, set to a tiny dataset."""
    repo = copy_project_files(root / "repo")
    sh("git", "init", "-q", cwd=repo)
    set_dataset(repo, "tiny", {"source": "local", "path": str(make_lf_folder(root / "lf"))})
    set_params(repo, **{"data.name": "tiny", "encoder.name": str(tiny_model), "tokenize.input_max_len": 16,
                        "infer.lambda": "auto", "infer.val_fraction": 0.25,  # tune holds out 1 of the 4 inputs
                        "infer.tau": 0.04,  # fixed, so a sweep of τ finds this value in the run cache
                        "memory.keep": 1.0})  # 3 memory inputs: keep auto has its own test (test_pipeline.py)
    commit_all(repo, "tiny")
    return repo


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def local_server(command: Callable[[int], list[str]], health_path: str, timeout: float = 120) -> Iterator[str]:
    """Run `command(port)` on a free port, wait until `health_path` answers, yield the base URL,
    then stop the whole process group (servers fork workers)."""
    port = free_port()
    server = subprocess.Popen(command(port), start_new_session=True, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(base + health_path, timeout=2)
                break
            except OSError:
                assert server.poll() is None, server.stderr.read()
                assert time.monotonic() < deadline, f"{command(port)[:4]} did not come up in {timeout:.0f} s"
                time.sleep(0.5)
        yield base
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def unit_rows(rng, n: int, dim: int, dtype=None):
    """`n` random unit rows of `dim` (float32 unless `dtype` says otherwise)."""
    rows = rng.standard_normal((n, dim)).astype(dtype or np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def brute_top_k(queries, keys, k: int):
    """The exact top-k of every index backend by a float64 product and a full sort: each row by descending
    similarity, ties by ascending id, padded with -1 / -inf past the keys."""
    sims = np.asarray(queries, dtype=np.float64) @ np.asarray(keys, dtype=np.float64).T
    order = np.lexsort((np.broadcast_to(np.arange(len(keys)), sims.shape), -sims), axis=1)[:, :k]
    ids, top = np.full((len(queries), k), -1, np.int64), np.full((len(queries), k), -np.inf, np.float32)
    ids[:, :order.shape[1]], top[:, :order.shape[1]] = order, np.take_along_axis(sims, order, axis=1)
    return ids, top


def search_all(search, queries, k: int, k_parts: int):
    """RAE's joint top-k and the inputs' and labels' top-k_parts (prefixes of their top-k) of a JointSearch."""
    from raexmc.memory.merge import prefix

    inputs, labels = search.search_parts(queries, k)
    return search.merge(inputs, labels, k), prefix(inputs, k_parts), prefix(labels, k_parts)


def memory_search(memory, baselines, queries, k: int, k_parts: int, tau: float, ef_search: int, retrieval=None,
                  other_b: tuple[int, ...] = ()):
    """RAE's keys at b = k_parts (and each of `other_b`) from an InputMemory's indexes (the prior at `tau`), and
    kNN's and the dual encoder's top-k_parts from the index stage's own (`baselines`)."""
    from raexmc.memory.merge import RaeRetrieval, prefix, rae_keys

    full_inputs, labels_k = baselines.search_parts(queries, k)
    rae = memory.indexes(baselines, ef_search)
    own_inputs = full_inputs if rae.inputs is baselines.inputs else rae.inputs.search(queries, k)
    own_labels = labels_k if rae.labels is baselines.labels else rae.labels.search(queries, k)

    def rae_at(b: int):
        return rae_keys(retrieval or RaeRetrieval(), own_inputs, own_labels, rae.inputs.count, b, memory.log_counts(),
                        tau)

    return rae_at(k_parts), {b: rae_at(b) for b in other_b}, prefix(full_inputs, k_parts), prefix(labels_k, k_parts)


def rae_on(evaluator, lam: float, tau: float, b: int):
    """RAE scoring the evaluator's memory values at (λ, τ, b): what evaluate_retrieval takes."""
    from raexmc.rae.model import RaeModel, RaeSettings

    return RaeModel(evaluator.rae_values, RaeSettings(lam, tau, b))


def dense_top_b_softmax(S, b: int, tau: float):
    """Brute-force reference: softmax over the b largest entries of each row of the similarity matrix S
    (cast to float32 first, as an index returns sims), zero elsewhere; ties go to the smaller column."""
    S = np.asarray(S).astype(np.float32).astype(np.float64)
    P = np.zeros_like(S)
    for q in range(S.shape[0]):
        top = np.argsort(-S[q], kind="stable")[:b]
        w = np.exp((S[q, top] - S[q, top].max()) / tau)
        P[q, top] = w / w.sum()
    return P


def softmax_error(sim_error: float, tau: float) -> float:
    """A bound on how far Σ_k w_k·c_k (w the softmax at τ of the similarities, each c_k in [0, 1]: RAE's scores)
    moves when every similarity moves by at most `sim_error`: each weight moves by a factor within
    exp(±2·sim_error/τ), so the sum by at most expm1(2·sim_error/τ)."""
    return math.expm1(2 * sim_error / tau)


_WRITER = """
import sys, time
from raexmc.io import atomic_dir
with atomic_dir(sys.argv[1]) as folder:
    (folder / "half-written.bin").write_bytes(bytes(4096))
    print(folder, flush=True)
    time.sleep(600)
"""


@contextmanager
def writer_in_progress(target: Path) -> Iterator[tuple[subprocess.Popen, Path]]:
    """A real process half way through writing `target` with atomic_dir; yields it and its
    temporary folder, and kills it (SIGKILL: no clean-up runs) on leaving, if not killed before."""
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(target)], stdout=subprocess.PIPE, text=True)
    try:
        yield proc, Path(proc.stdout.readline().strip())
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


def leftover_of_killed_writer(target: Path) -> Path:
    """The temporary folder a writer of `target` killed mid-write (as by the OOM killer) leaves behind."""
    with writer_in_progress(target) as (_, tmp):
        pass
    assert tmp.is_dir()
    return tmp


def peak_rss_of(command: list[str], cwd: Path) -> int:
    """Run `command` to its end and return its peak resident memory in bytes (a memory bound, not a
    timing: it does not depend on the machine's load). It must succeed."""
    proc = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    error = proc.stderr.read().decode()
    proc.stderr.close()
    assert os.waitstatus_to_exitcode(status) == 0, error
    return usage.ru_maxrss * 1024  # kilobytes on Linux


def small_filesystem(size: str) -> tuple[str, ...] | None:
    """A command prefix that runs a shell command with a `size` tmpfs mounted on its first
    argument's folder, in a user namespace (no root needed); None where the kernel forbids it."""
    if not shutil.which("unshare"):
        return None
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    return ("unshare", "-rm", "sh", "-c", f'mount -t tmpfs -o size={size} tmpfs "$0" && exec "$@"') \
        if probe.returncode == 0 else None


@dataclass(frozen=True)
class SmallDiskRun:
    proc: subprocess.CompletedProcess
    left: list[str]  # what the small folder holds once the command has ended
    error: str  # what a write that does not fit fails with there


def run_on_small_disk(folder: Path, size: int, command: list[str], cwd: Path) -> SmallDiskRun:
    """Run `command` where `folder` can take at most about `size` bytes: a tmpfs of that size mounted on
    it (in a user namespace, which ends with the command, so the folder is listed just before), or where
    the kernel forbids that, a limit of `size` bytes on any file the command writes (RLIMIT_FSIZE: a
    write past it fails with EFBIG, and the limit must leave room for the MLflow store)."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = small_filesystem(str(size))
    if mounted is not None:
        listing = folder.with_name(f"{folder.name}.left")
        then_list = f'"$@"; status=$?; ls -A "{folder}" > "{listing}"; exit $status'
        proc = subprocess.run([*mounted, str(folder), "sh", "-c", then_list, "sh", *command], cwd=cwd,
                              capture_output=True, text=True)
        return SmallDiskRun(proc, listing.read_text().split(), os.strerror(errno.ENOSPC))
    return run_under_file_size_limit(folder, size, command, cwd)


def run_under_file_size_limit(folder: Path, size: int, command: list[str], cwd: Path) -> SmallDiskRun:
    """Run `command` as under `ulimit -f`: no file it writes may grow past `size` bytes (RLIMIT_FSIZE). Python
    ignores SIGXFSZ, so a write past the limit fails with EFBIG instead of killing the process. The limit must
    leave room for the MLflow store."""
    folder.mkdir(parents=True, exist_ok=True)
    limited = ("import os, resource, sys; hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]; "
               f"resource.setrlimit(resource.RLIMIT_FSIZE, ({size}, hard)); os.execv(sys.argv[1], sys.argv[1:])")
    proc = subprocess.run([sys.executable, "-c", limited, *command], cwd=cwd, capture_output=True, text=True)
    return SmallDiskRun(proc, sorted(os.listdir(folder)), os.strerror(errno.EFBIG))


def small_project(root, n_train: int = 80, n_test: int = 12, n_labels: int = 20):
    """A made-up project of random unit embeddings (d = 8) and labels, as the embed stage lays them out, with the
    repository's params.yaml: data/tiny and artifacts/tiny/embeddings."""
    rng = np.random.default_rng(0)
    data, embeddings = root / "data" / "tiny", root / "artifacts" / "tiny" / "embeddings"
    for folder in (data, embeddings, root / "bench" / "results"):
        folder.mkdir(parents=True)
    (data / "stats.json").write_text(json.dumps({"N_train": n_train, "N_test": n_test, "L": n_labels}))
    for split, n in (("train", n_train), ("test", n_test)):
        labels = (rng.random((n, n_labels)) < 0.1) | (np.arange(n_labels) == rng.integers(0, n_labels, (n, 1)))
        sp.save_npz(data / f"Y_{split}.npz", sp.csr_matrix(labels.astype(np.float64)))
        sp.save_npz(data / f"filter_{split}.npz", sp.csr_matrix((n, n_labels), dtype=bool))
    for split, n in (("train", n_train), ("labels", n_labels), ("test", n_test)):
        v = rng.normal(size=(n, 8)).astype(np.float32)
        np.save(embeddings / f"{split}.npy", v / np.linalg.norm(v, axis=1, keepdims=True))
    (embeddings / "meta.json").write_text(json.dumps({"encoder": "made-up"}))
    shutil.copyfile(REPO / "params.yaml", root / "params.yaml")
    return data, embeddings


def add_wheel(index: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    """A minimal pure-Python wheel of `name` `version` in `index`/<name>/, listed in that folder's index.html: the
    layout of a simple index (PEP 503), which pip reads from file:// as from https://."""
    dist = f"{name.replace('-', '_')}-{version}"
    (index / name).mkdir(parents=True, exist_ok=True)
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {requirement}\n" for requirement in requires)
    with zipfile.ZipFile(index / name / f"{dist}-py3-none-any.whl", "w") as wheel:
        wheel.writestr(f"{dist}.dist-info/METADATA", metadata)
        wheel.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                  "Tag: py3-none-any\n")
        wheel.writestr(f"{dist}.dist-info/RECORD", "")
    links = "".join(f'<a href="{path.name}">{path.name}</a>\n' for path in sorted((index / name).glob("*.whl")))
    (index / name / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")


def selection_record(**fields) -> dict:
    """A complete selection.json record (evaluation.selection_file.Selection, under the file's names) at λ 0.5 and
    τ 0.04, with `fields` changed: for tests of what reads one."""
    return {"lambda": 0.5, "tau": 0.04, "b": 200, "retrieval": "joint", "label_share": None, "metric": "P@1",
            "auto": {"lambda": True, "tau": False, "retrieval": False, "label_share": False}, "val_value": 0.61,
            "fixed_lambda": 0.5, "fixed_tau": 0.04, "fixed_label_share": None, "fixed_val_value": 0.58,
            "val_queries": 10, "val_folds": 1, "memory_inputs": 30, "memory_input_keys": 30, "val_fraction": 0.25,
            "val_max_queries": 20000, "val_seed": 0, "val_split_from": "infer",
            "validation": [{"lambda": 0.5, "tau": 0.04, "label_share": None, "P@1": 0.61}], **fields}


def made_up_predictor(out: Path, dataset: Path, embeddings: Path, index: Path, memory: Path, tune: Path,
                      params: Path) -> Path:
    """The package stage's model folder `out` for made-up embeddings, without an encoder (there is none to package),
    at the tune stage's choice and params' infer.b, as the evaluate stage measures it; made once."""
    if out.is_dir():
        return out
    from raexmc.data.dataset import Dataset
    from raexmc.evaluation.selection_file import read_selection
    from raexmc.memory.indexes import memory_backend
    from raexmc.rae.model import RaeSettings
    from raexmc.rae.packaging import package_model
    from raexmc.settings import load_settings

    p, selection = load_settings(params), read_selection(tune)
    settings = RaeSettings(selection.lam, selection.tau, p.infer.b, selection.rae_retrieval)
    package_model(out, Dataset(dataset), None, index, memory, embeddings, settings, relevance=p.infer.relevance,
                  input_fields=p.tokenize.input_fields, backend=memory_backend(index), ef_search=p.infer.ef_search,
                  about={})
    return out
