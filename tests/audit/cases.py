"""The bad-input corpus: every bad input and fault we know of, each a Case that breaks one thing in a copy of the
tiny built project (tests/audit/project.py) and runs it through the real stage, CLI or server, and the verdict
on what the user saw: a case passes when its one line names the file, record or key, with no traceback and no
output left behind (or, for a fault that must be survived, when it succeeds)."""

from __future__ import annotations

import functools
import gzip
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tests.audit.project import PYTHON, Outcome, Project, seen
from tests.helpers import free_port, garble_milvus_lite, json_edited, reseal, write_jsonl_gz


@dataclass
class Case:
    name: str
    through: str              # the stage, command or server it goes through: "download", "predict", "serve", ...
    what: str
    run: Callable[[Project], Outcome]
    names: str                # the substring the one line must carry (file, record or key)
    expect_failure: bool = True
    http_status: int = 400    # what a failing server case must be answered with


def case_of(row: Case | tuple) -> Case:
    """A row (name, through, what, must name[, change]) as its Case, in a folder of its name: download with a change
    of the LF folder (download_with), predict with one of a model folder (damaged_model), else that stage with
    params.yaml updates and inputs broken by the functions they map to (stage_with)."""
    if isinstance(row, Case):
        return row
    name, through, what, names, *change = row
    change = change[0] if change else {}
    if callable(change):
        return Case(name, through, what, (lambda p: download_with(p, name, change)) if through == "download"
                    else lambda p: damaged_model(p, name, change), names)
    broken = {key: value for key, value in change.items() if callable(value)} or None
    updates = {key: value for key, value in change.items() if not callable(value)}
    return Case(name, through, what, lambda p: stage_with(p, through, name, broken, **updates), names)


def read_jsonl_gz(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def download_with(project: Project, name: str, edit: Callable[[Path], None]) -> Outcome:
    """Copy the LF folder, let `edit` break it, and run the download stage on it."""
    folder = project.fresh(name)
    shutil.copytree(project.lf, folder / "lf")
    edit(folder / "lf")
    params = project.params(folder, **{"datasets.tiny.path": str(folder / "lf")})
    return project.stage("download", params, out=folder / "data")


def edit_record(file: str, row: int, **changes) -> Callable[[Path], None]:
    def edit(lf: Path) -> None:
        records = read_jsonl_gz(lf / file)
        records[row].update(changes)
        write_jsonl_gz(lf / file, records)
    return edit


def empty_test_split(lf: Path) -> None:
    records = read_jsonl_gz(lf / "tst.json.gz")
    write_jsonl_gz(lf / "tst.json.gz", [{**r, "target_ind": [], "target_rel": []} for r in records])


def ngame_bad_value(project: Project) -> Outcome:
    folder = project.fresh("ngame-rel")
    ngame = folder / "ngame"
    ngame.mkdir()
    records = {split: read_jsonl_gz(project.lf / f"{split}.json.gz") for split in ("trn", "tst", "lbl")}
    (ngame / "Y.txt").write_text("".join(r["title"] + "\n" for r in records["lbl"]))
    for split in ("trn", "tst"):
        (ngame / f"{split}_X.txt").write_text("".join(r["title"] + "\n" for r in records[split]))
        rows = [" ".join(f"{i}:{v}" for i, v in zip(r["target_ind"], r["target_rel"])) for r in records[split]]
        if split == "trn":
            rows[1] = rows[1].split(":")[0] + ":abc"
        (ngame / f"{split}_X_Y.txt").write_text(f"{len(rows)} {len(records['lbl'])}\n" + "\n".join(rows) + "\n")
    params = project.params(folder, **{"datasets.tiny.path": str(ngame)})
    return project.stage("download", params, out=folder / "data")


def corrupt_store(project: Project) -> Outcome:
    folder = project.fresh("mlflow-corrupt")
    store = folder / "mlflow.db"
    store.write_bytes(b"SQLite format 3\x00" + os.urandom(4096))
    params = project.params(folder)
    return project.run([PYTHON, "stages/download.py", "--params", str(params), "--out", str(folder / "data")],
                       env={"MLFLOW_TRACKING_URI": f"sqlite:///{store}"}, output=folder / "data")


def on_small_tmpfs(mount: Path, size: str, run: Callable[[], Outcome]) -> Outcome:
    """`run` with a `size` tmpfs mounted on `mount` (needs root to mount; skipped otherwise)."""
    mount.mkdir(parents=True)
    mounted = os.geteuid() == 0 and not subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                                                        str(mount)]).returncode
    if not mounted:
        return Outcome(-1, "skipped: mounting a small tmpfs needs root", False)
    try:
        outcome = run()
        outcome.detail["left_on_the_small_disk"] = sorted(path.name for path in mount.iterdir())
        outcome.output_left = outcome.output_left or bool(outcome.detail["left_on_the_small_disk"])
        return outcome
    finally:
        subprocess.run(["umount", str(mount)])


def disk_full(project: Project) -> Outcome:
    """The download stage writing onto an 8 KiB tmpfs."""
    folder = project.fresh("enospc")
    return on_small_tmpfs(folder / "small", "8k", lambda: project.stage("download", project.params(folder),
                                                                         out=folder / "small" / "data"))


# Memory-mapped outputs on a full disk (without the reservation: SIGBUS, exit -7 or 135, no message, the temp left),
# and the temporary of a killed stage that DVC then restores from its run cache (which no rerun of it removes).
SYNTHETIC = {"source": "synthetic", "n_train": 32768, "n_test": 64, "n_labels": 256, "labels_per_input": 2,
             "input_words": [4, 8], "label_words": [3, 4], "topic_size": 32}  # 8 MiB of token ids, 4 MiB of vectors


@functools.cache
def synthetic_tokens(project: Project) -> Path:
    """A folder holding params.yaml for 32,768 synthetic inputs (128 tokens each), data/ and tokens/."""
    folder = project.fresh("synthetic")
    params = project.params(folder, **{"data.name": "syn", "datasets.syn": SYNTHETIC, "tokenize.input_max_len": 128})
    for script, options in (("download", {"out": folder / "data"}),
                            ("tokenize_texts", {"dataset": folder / "data", "out": folder / "tokens"})):
        if project.stage(script, params, **options).code != 0:
            raise RuntimeError(f"the synthetic {script} failed")
    return folder


def memmap_on_full_disk(project: Project, stage: str) -> Outcome:
    """The tokenize or embed stage of the synthetic data onto a 1 MiB tmpfs."""
    synthetic = synthetic_tokens(project)
    small = project.fresh(f"{stage}-full") / "small"
    inputs = ({"dataset": synthetic / "data", "out": small / "tokens"} if stage == "tokenize_texts" else
              {"model": project.root / ARTIFACTS["model"], "tokens": synthetic / "tokens",
               "out": small / "embeddings"})
    return on_small_tmpfs(small, "1m", lambda: project.stage(stage, synthetic / "params.yaml", **inputs))


def killed_then_restored(project: Project, stage: str = "evaluate", output: str = "eval") -> Outcome:
    """SIGKILL `stage` in `dvc repro` while it writes (its `output` temporaries, or a scratch folder named as they
    are); the next plain `dvc repro` restores the stage from the run cache (it does not run) and must still leave no
    `.*.tmp` of the killed run (in a copy of the project)."""
    repo = project.fresh(f"run-cache-{stage}") / "repo"
    subprocess.run(["cp", "-a", str(project.root), str(repo)], check=True)
    dvc = [PYTHON, "-m", "dvc", "repro"]
    rerun = subprocess.Popen([*dvc, "--force", "--single-item", stage], cwd=repo, env=project.env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    artifacts = repo / "artifacts" / "tiny"
    while not (temps := list(artifacts.glob(f".{output}.*.tmp"))) and rerun.poll() is None:
        time.sleep(0.01)
    if not temps:
        return Outcome(1, f"{stage} ended before it could be killed while writing", False)
    os.kill(int(temps[0].name.removeprefix(f".{output}.").partition("-")[0]), 9)
    rerun.wait()
    proc = subprocess.run(dvc, cwd=repo, env=project.env, capture_output=True, text=True, timeout=900)
    restored = [line for line in proc.stdout.splitlines() if f"'{stage}' is cached" in line]
    left = sorted(path.name for folder in ("data", "artifacts") for path in (repo / folder).rglob(".*.tmp"))
    left += sorted(path.name for path in artifacts.glob("tmp*"))  # tempfile's default names, swept by nothing
    return Outcome(proc.returncode if restored else 1, (restored or [f"{stage} was not restored"])[0],
                   "Traceback" in proc.stderr, bool(left), {"killed_run_left": temps[0].name, "left_after": left})


def predict(project: Project, *args: str, stdin: bytes | None = None) -> Outcome:
    return project.run([PYTHON, "-m", "raexmc.cli", "predict", *args], stdin=stdin)


def predict_file(name: str, content: bytes) -> Callable[[Project], Outcome]:
    """predict --file of a file `name` holding `content`."""
    def run(project: Project) -> Outcome:
        path = project.fresh(f"predict-{name}") / name
        path.write_bytes(content)
        return predict(project, "--file", str(path))
    return run


def stale_leftover(project: Project) -> Outcome:
    """A folder a killed download left (atomic_dir's temp name); the next download must remove it."""
    folder = project.fresh("leftover")
    leftover = folder / ".data.k1ll3d.tmp"
    leftover.mkdir()
    (leftover / "part.npz").write_bytes(b"\0" * 1024)
    outcome = project.stage("download", project.params(folder), out=folder / "data")
    outcome.output_left = leftover.exists()
    return outcome


def tokenize_rss(project: Project) -> Outcome:
    """One 10 MB input: tokenize must succeed with about the clean run's peak memory."""
    peaks = {}
    for name, huge in (("clean", False), ("huge", True)):
        folder = project.fresh(f"tokenize-{name}")
        shutil.copytree(project.lf, folder / "lf")
        if huge:
            edit_record("trn.json.gz", 0, content="lorem ipsum " * 900_000)(folder / "lf")
        params = project.params(folder, **{"datasets.tiny.path": str(folder / "lf")})
        project.stage("download", params, out=folder / "data")
        args = [PYTHON, "stages/tokenize_texts.py", "--params", str(params), "--dataset", str(folder / "data"),
                "--out", str(folder / "tokens")]
        proc = subprocess.Popen(args, cwd=project.root, env=project.env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        stderr = proc.stderr.read().decode("utf-8", "replace")
        _, status, usage = os.wait4(proc.pid, 0)
        peaks[name] = usage.ru_maxrss / 1024
    lines = [line for line in stderr.replace("\r", "\n").splitlines() if line.strip()]
    delta = peaks["huge"] - peaks["clean"]
    return Outcome(os.waitstatus_to_exitcode(status) if delta <= 50 else 1,
                   f"peak RSS clean {peaks['clean']:.0f} MB, with a 10 MB input {peaks['huge']:.0f} MB "
                   f"(+{delta:.0f} MB)", "Traceback" in stderr, detail={"stderr_last": lines[-1] if lines else ""})


ARTIFACTS = {"dataset": "data/tiny", "embeddings": "artifacts/tiny/embeddings", "index": "artifacts/tiny/index",
             "tune": "artifacts/tiny/tune", "memory": "artifacts/tiny/memory", "model": "artifacts/tiny/model",
             "tokens": "artifacts/tiny/tokens", "eval": "artifacts/tiny/eval", "predictor": "artifacts/tiny/predictor"}
STAGE_INPUTS = {"download": (), "tokenize_texts": ("dataset",), "embed": ("model", "tokens"), "index": ("embeddings",),
                "memory": ("dataset", "embeddings"), "tune": ("dataset", "embeddings"),
                "evaluate": ("dataset", "embeddings", "index", "tune", "predictor"),
                "significance": ("eval",), "package": ("dataset", "model", "embeddings", "index", "tune", "memory")}
STAGE_OUTPUT = {"download": "data", "tokenize_texts": "tokens", "embed": "embeddings", "index": "index",
                "memory": "memory", "tune": "tune", "evaluate": "eval", "significance": "significance.json",
                "package": "predictor"}


def stage_with(project: Project, stage: str, name: str, broken: dict[str, Callable[[Path], None]] | None = None,
               **updates) -> Outcome:
    """Run `stage` on the built project's inputs with `updates` set in params.yaml; each input named in
    `broken` is first copied into the case's folder and broken there by its function."""
    folder = project.fresh(name)
    inputs = {key: project.root / ARTIFACTS[key] for key in STAGE_INPUTS[stage]}
    for key, breaks in (broken or {}).items():
        shutil.copytree(inputs[key], folder / key)
        inputs[key] = folder / key
        breaks(folder / key)
    rows = {"headline": folder / "headline"} if stage == "significance" else {}
    return project.stage(stage, project.params(folder, **updates), **inputs, **rows, out=folder / STAGE_OUTPUT[stage])


def python_only_tokenizer(project: Project) -> Outcome:
    """encoder.name: a folder holding ByT5's tokenizer, which has no fast (Rust) version."""
    from transformers import ByT5Tokenizer

    folder = project.fresh("byt5")
    ByT5Tokenizer().save_pretrained(folder)
    return stage_with(project, "tokenize_texts", "python-only-tokenizer", **{"encoder.name": str(folder)})


def truncate(name: str) -> Callable[[Path], None]:
    def cut(folder: Path) -> None:
        path = folder / name
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return cut


def overwrite(name: str, content: bytes) -> Callable[[Path], None]:
    return lambda folder: (folder / name).write_bytes(content)


def per_instance_edited(change: Callable) -> Callable[[Path], None]:
    """A per_instance.npz of the right keys whose arrays `change` altered (all NaN; the last test query missing, as
    another test set's)."""
    def edit(folder: Path) -> None:
        with np.load(folder / "per_instance.npz") as archive:
            arrays = {key: change(archive[key]) for key in archive.files}
        np.savez(folder / "per_instance.npz", **arrays)
    return edit


def compare_with(project: Project, name: str, breaks: Callable[[Path], None]) -> Outcome:
    """The significance stage with significance.compare_with set to a copy of the run's evaluation that
    `breaks` changed."""
    folder = project.fresh(name)
    shutil.copytree(project.root / ARTIFACTS["eval"], folder / "other")
    breaks(folder / "other")
    params = project.params(folder, **{"significance.compare_with": str(folder / "other" / "per_instance.npz")})
    return project.stage("significance", params, eval=project.root / ARTIFACTS["eval"], headline=folder / "headline",
                         out=folder / "significance.json")


def serve_requests(project: Project) -> dict[str, Outcome]:
    """Bad requests against one real `raexmc serve` process."""
    port = free_port()
    server = subprocess.Popen([PYTHON, "-m", "raexmc.cli", "serve", "--port", str(port)], cwd=project.root,
                              env=project.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(base + "/ping", timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("raexmc serve did not come up")
                time.sleep(0.5)
        return {name: post(base + "/invocations", body) for name, body in LIMIT_BODIES.items()}
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)


def post(url: str, body: dict) -> Outcome:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            counts = [len(row["labels"]) for row in json.loads(response.read())["predictions"]]
            return Outcome(response.status, f"answered with {counts} labels per query", False)
    except urllib.error.HTTPError as error:
        text = error.read().decode("utf-8", "replace")
        message = json.loads(text).get("message", text) if text.startswith("{") else text
        return Outcome(error.code, message.splitlines()[0] if message else "", "Traceback" in message,
                       detail={"message_lines": len(message.splitlines())})


# Issue 50, causes 2 to 6: JSON nested too deeply, a query with no visible character, a validation share that
# leaves nothing to train on, a damaged checkpoint, a garbled label record of the right size. (Cause 1, a graph cut
# short by a file-size limit: tests/memory/test_file_size_limit.py runs the index and memory stages under it.)
def train_with(project: Project, name: str, checkpoint: bytes | None = None, **updates) -> Outcome:
    """The train stage, fine-tuning, with `updates` in params.yaml and a last.pt holding `checkpoint`."""
    folder = project.fresh(name)
    (folder / "checkpoints").mkdir()
    if checkpoint is not None:
        (folder / "checkpoints" / "last.pt").write_bytes(checkpoint)
    params = project.params(folder, **{"encoder.mode": "fine-tuned", "train.device": "cpu", **updates})
    return project.stage("train", params, dataset=project.root / ARTIFACTS["dataset"],
                         tokens=project.root / ARTIFACTS["tokens"], out=folder / "model",
                         checkpoints=folder / "checkpoints", curves=folder / "curves")


def garbled_label_record(project: Project) -> Outcome:
    """predict with a copy of the artifacts whose label_records.jsonl has line 3 overwritten, its size unchanged."""
    artifacts = project.fresh("garbled-label") / "artifacts"
    for name in ("model", "index", "predictor"):
        shutil.copytree(project.root / "artifacts" / "tiny" / name, artifacts / "tiny" / name)
    path = artifacts / "tiny" / "predictor" / "label_records.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[2] = b"\x00" * (len(lines[2]) - 1) + b"\n"
    path.write_bytes(b"".join(lines))
    reseal(path.parent)  # past the manifest (which names the file alone): the record's own check
    return predict(project, "--artifacts", str(artifacts), "--name", "tiny", "python")


def damaged_model(project: Project, name: str, damage: Callable[[Path], None]) -> Outcome:
    """predict with a moved copy of the model folder that `damage` broke (issue 60's causes 1, 2 and 4)."""
    folder = project.fresh(name) / "model"
    shutil.copytree(project.root / "artifacts" / "tiny" / "predictor", folder)
    damage(folder)
    return predict(project, "--model", str(folder), "python")


def removed(*names: str) -> Callable[[Path], None]:
    def remove(folder: Path) -> None:
        for name in names:
            (shutil.rmtree if (folder / name).is_dir() else Path.unlink)(folder / name)
    return remove


def values_filled(value: float) -> Callable[[Path], None]:
    def fill(folder: Path) -> None:
        import scipy.sparse as sp

        values = sp.load_npz(folder / "values.npz")
        values.data[:] = value
        sp.save_npz(folder / "values.npz", values)
    return fill


MODEL_FOLDER_CASES = [
    ("model-no-encoder", "predict", "predict with a model folder without encoder/", "model/encoder: missing",
     removed("encoder")),
    ("model-no-label-records", "predict", "predict with a model folder without label_records.jsonl",
     "label_records.jsonl: missing", removed("label_records.jsonl")),
    ("model-no-label-files", "predict", "predict with a model folder without label_records.jsonl and label_offsets.npy",
     "label_offsets.npy: missing", removed("label_records.jsonl", "label_offsets.npy")),
    ("model-no-indexes", "predict", "predict with a model folder without inputs/ and labels/", "model/inputs: missing",
     removed("inputs", "labels")),
    ("values-all-nan", "predict", "predict with every value of values.npz NaN", "values.npz",
     values_filled(float("nan"))),
    ("values-all-negative", "predict", "predict with every value of values.npz -1e6", "values.npz",
     values_filled(-1e6)),
    ("encoder-no-tokenizer", "predict", "predict with encoder/ lacking tokenizer.json and tokenizer_config.json",
     "encoder/tokenizer.json: missing", removed("encoder/tokenizer.json", "encoder/tokenizer_config.json")),
    ("values-nan-resealed", "predict", "predict with values.npz all NaN under a manifest written for it",
     "values.npz: holds NaN", lambda f: (values_filled(float("nan"))(f), reseal(f))),
    ("encoder-no-tokenizer-resealed", "predict",
     "predict with encoder/ lacking its tokenizer files under a manifest written for it",
     "encoder/tokenizer.json: missing",
     lambda f: (removed("encoder/tokenizer.json", "encoder/tokenizer_config.json")(f), reseal(f)))]


PROBE_50_CASES = [
    Case("predict-deep-json", "predict", "predict --file: a JSON line nested 2,000 deep",
         predict_file("deep.jsonl", b'{"text": "python"}\n' + b"[" * 2000 + b"]" * 2000 + b"\n"),
         "deep.jsonl:2"),
    Case("predict-nul-query", "predict", "predict from stdin: a line of NUL and zero-width characters",
         lambda p: predict(p, stdin="python\n\x00\u200b\x00\n".encode()), "<stdin>:2"),
    Case("val-fraction-all", "train", "train.val_fraction 0.9999 with encoder.mode fine-tuned",
         lambda p: train_with(p, "val-fraction-all", **{"train.val_fraction": 0.9999}), "train.val_fraction"),
    Case("checkpoint-damaged", "train", "a resume from a garbled checkpoints/last.pt",
         lambda p: train_with(p, "checkpoint-damaged", b"\x80\x03garbage" * 64, **{"train.val_fraction": 0.34}),
         "last.pt"),
    Case("label-records-garbled", "predict", "predict with line 3 of label_records.jsonl garbled, its size kept",
         garbled_label_record, "label_records.jsonl:3"),
    # hand-edited, or damaged, and resealed: past the manifest (which names the file alone), the setting's own check
    ("model-setting-bad", "predict", "predict with a model folder whose settings.json has tau -1", "settings.json:tau",
     lambda f: (json_edited("settings.json", tau=-1)(f), reseal(f)))]
# Faults that were a traceback (encoder weights cut short, a preset that is not a mapping, an output folder this
# user may not write, serve on a corrupt store, the store filling the disk while a stage logs), and serve's limits
# on one request: a body over 1 MiB (413) and more than 1,000 records (400).
DENIED = Path("/sys/raexmc-denied")  # sysfs: even root may not create anything there


def output_denied(project: Project) -> Outcome:
    if not Path("/sys/kernel").is_dir():
        return Outcome(-1, "skipped: needs sysfs, where even root may not write", False)
    return project.stage("download", project.params(project.fresh("denied")), out=DENIED / "data")


def serve_on_corrupt_store(project: Project) -> Outcome:
    store = project.fresh("serve-store") / "mlflow.db"
    store.write_bytes(b"SQLite format 3\x00" + os.urandom(4096))
    return project.run([PYTHON, "-m", "raexmc.cli", "serve", "--port", str(free_port())],
                       env={"MLFLOW_TRACKING_URI": f"sqlite:///{store}"})


def store_fills_while_logging(project: Project) -> Outcome:
    """The project's store copied onto a tmpfs 2 MiB larger than it, which is then filled: the download stage runs,
    and logging its metrics fails. Its output is whole (renamed into place before the log), so it is not counted as
    left. The tmpfs grows with the store, which every case before this one logs into."""
    folder = project.fresh("store-fills")
    small = folder / "small"

    def run() -> Outcome:
        store = small / "mlflow.db"
        shutil.copy(project.root / "mlflow.db", store)
        with open(small / "filler", "wb") as filler:
            try:
                while True:
                    filler.write(b"\0" * 65536)
                    filler.flush()
            except OSError:
                pass
        outcome = project.run([PYTHON, "stages/download.py", "--params", str(project.params(folder)), "--out",
                               str(folder / "data")], env={"MLFLOW_TRACKING_URI": f"sqlite:///{store}"})
        for path in small.iterdir():  # the store and its filler: no output of the stage's
            path.unlink()
        return outcome
    return on_small_tmpfs(small, f"{(project.root / 'mlflow.db').stat().st_size // 2**20 + 2}m", run)


LIMIT_BODIES = {"serve-body-too-large": {"dataframe_records": [{"text": "python " * 160000}]},
                "serve-too-many-records": {"dataframe_records": [{"text": "python"}] * 1001}}

ONE_LINE_FAULT_CASES = [
    ("encoder-weights-cut", "embed", "the model folder's model.safetensors cut in half (embed)", "model.safetensors",
     {"model": truncate("model.safetensors")}),
    Case("preset-not-mapping", "preset", "raexmc preset of a preset written as a list", lambda p: p.run(
        [PYTHON, "-m", "raexmc.cli", "preset", "mine", "--params",
         str(p.params(p.fresh("preset-list"), **{"presets.mine": ["a", "b"]}))]), "presets.yaml:mine"),
    Case("output-denied", "download", "download --out under /sys (EPERM/EACCES/EROFS, even for root)",
         output_denied, str(DENIED)),
    Case("store-corrupt-serve", "serve", "raexmc serve with mlflow.db past its header random bytes",
         serve_on_corrupt_store, "mlflow.db"),
    Case("store-full-logging", "download", "the MLflow store fills its disk as the stage logs (a tmpfs 2 MiB over it)",
         store_fills_while_logging, "free some space"),
    Case("serve-body-too-large", "serve", "serve a 1.1 MB body (limit 1 MiB)", None, "--max-body-bytes",
         http_status=413),
    Case("serve-too-many-records", "serve", "serve 1,001 records (limit 1,000)", None, "--max-records")]


def evaluate_broken_scores(project: Project, name: str, breaks: Callable[[object], object]) -> Outcome:
    """`raexmc evaluate --scores` on a copy of the evaluate stage's RAE score file that `breaks` changed (it gets
    and returns the CSR matrix), written with scipy as any system would write one."""
    import scipy.sparse as sp

    folder = project.fresh(name)
    sp.save_npz(folder / "rae.npz", breaks(sp.load_npz(project.root / "artifacts/tiny/scores/rae.npz")))
    out = folder / "metrics.json"
    return project.run([PYTHON, "-m", "raexmc.cli", "evaluate", "--dataset", ARTIFACTS["dataset"], "--scores",
                        str(folder / "rae.npz"), "--out", str(out)], output=out)


def nan_score(matrix):
    matrix.data[-1] = float("nan")
    return matrix


SCORE_FILE_CASES = [
    Case("scores-nan", "raexmc evaluate", "evaluate --scores: a score file with a NaN score",
         lambda p: evaluate_broken_scores(p, "scores-nan", nan_score), "scores-nan/rae.npz:row 2"),
    Case("scores-wrong-shape", "raexmc evaluate", "evaluate --scores: a score file with one test row too few",
         lambda p: evaluate_broken_scores(p, "scores-short", lambda m: m[:-1]), "scores-short/rae.npz")]


# Issue 60, causes 3 and 5: errors that named no file (a key that is not finite, an index of another dimension,
# int8's ONNX export on a full TMPDIR), and two catalogue values checked only where used.
def foldoc_entry(project: Project) -> dict:
    from raexmc.settings import read_mapping

    return read_mapping(project.root / "datasets" / "foldoc.yaml", "dataset entry")


def nan_key(folder: Path) -> None:
    keys = np.load(folder / "inputs" / "keys.npy")
    keys[1, 0] = np.nan
    np.save(folder / "inputs" / "keys.npy", keys)


def wider_index(*key_sets: str) -> Callable[[Path], None]:
    """The model's exact indexes of `key_sets` rebuilt on their keys padded with 8 zero dimensions (another
    encoder's width)."""
    def widen(folder: Path) -> None:
        from raexmc.memory.exact import ExactIndex
        from raexmc.memory.persistence import save_index

        for key_set in key_sets:
            keys = np.load(folder / key_set / "keys.npy")
            padded = np.hstack([keys, np.zeros((len(keys), 8), np.float32)])
            shutil.rmtree(folder / key_set)
            save_index(ExactIndex(padded), folder / key_set)
            np.save(folder / key_set / "keys.npy", padded)
    return widen


def int8_on_full_tmpdir(project: Project) -> Outcome:
    """The embed stage at embed.precision int8 with TMPDIR on a 1 MiB tmpfs: the ONNX export (4 MB) does not fit."""
    folder = project.fresh("int8-tmpdir")
    small = folder / "small"
    params = project.params(folder, **{"embed.precision": "int8", "embed.device": "cpu"})
    out = folder / "embeddings"

    def run() -> Outcome:
        inputs = [f"--{key}={project.root / ARTIFACTS[key]}" for key in STAGE_INPUTS["embed"]]
        outcome = project.run([PYTHON, "stages/embed.py", "--params", str(params), *inputs, "--out", str(out)],
                              env={"TMPDIR": str(small)}, output=out)
        # what the libraries leave in TMPDIR for themselves, not outputs of the stage: torch's compile cache and the
        # file ONNX Runtime writes when it is imported
        theirs = [*small.glob("torchinductor_*"), *small.glob(".ses")]
        outcome.detail["libraries_left"] = sorted(path.name for path in theirs)
        for path in theirs:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
        return outcome
    return on_small_tmpfs(small, "1m", run)


def milvus_labels(*edits: Callable[[Path], None], uri: str = "milvus.db") -> Callable[[Path], None]:
    """The model's exact labels' index rebuilt as a Milvus collection of the same keys (Milvus Lite in the folder, or
    on the server at `uri`), then each of `edits` applied to that index's folder."""
    def rebuild(folder: Path) -> None:
        from raexmc.memory.indexes import make_index
        from raexmc.memory.persistence import save_index

        keys = np.load(folder / "labels" / "keys.npy")
        shutil.rmtree(folder / "labels")
        save_index(make_index("milvus", keys, uri=uri, M=8, ef_construction=16, progress=False), folder / "labels")
        for edit in edits:
            edit(folder / "labels")
        reseal(folder)  # past the manifest: the collection's own checks
    return rebuild


def milvus_server_dies(project: Project) -> Outcome:
    """predict --scores-out of 4,000 queries, one a request, with the labels on a Milvus Lite server process that is
    SIGKILLed a second after the model has loaded (its collection checked): mid-search, no score file may be left."""
    folder = project.fresh("milvus-server-dies")
    port = free_port()
    server = subprocess.Popen([PYTHON, "-m", "milvus_lite", "server", "--data-dir", str(folder / "server"),
                               "--port", str(port)], start_new_session=True, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while socket.socket().connect_ex(("127.0.0.1", port)):
            if server.poll() is not None or time.monotonic() > deadline:
                return Outcome(1, "the Milvus Lite server did not start", False)
            time.sleep(0.2)
        model, queries, scores = folder / "model", folder / "queries.txt", folder / "scores.npz"
        shutil.copytree(project.root / "artifacts" / "tiny" / "predictor", model)
        milvus_labels(uri=f"http://127.0.0.1:{port}")(model)
        queries.write_text("".join(f"query {i} about unix\n" for i in range(4000)))
        run = subprocess.Popen([PYTHON, "-m", "raexmc.cli", "predict", "--model", str(model), "--file", str(queries),
                                "--batch-size", "1", "--verbose", "--scores-out", str(scores)], cwd=project.root,
                               env=project.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        stderr = b""
        while b"loaded " not in stderr and (line := run.stderr.readline()):
            stderr += line
        time.sleep(1.0)
        os.killpg(server.pid, 9)
        stderr += run.stderr.read()
        return seen(run.wait(timeout=900), stderr, scores)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, 9)
        server.wait()


def milvus_lite_disk_full(project: Project, where: str) -> Outcome:
    """The index stage at index.backend milvus with its output (`where` "out") or TMPDIR, where the Lite server
    writes while the stage builds, on an 8 KiB tmpfs."""
    folder = project.fresh(f"milvus-full-{where}")
    small = folder / "small"
    params = project.params(folder, **{"index.backend": "milvus"})
    inputs = [f"--{key}={project.root / ARTIFACTS[key]}" for key in STAGE_INPUTS["index"]]
    out = small / "index" if where == "out" else folder / "index"
    return on_small_tmpfs(small, "8k", lambda: project.run(
        [PYTHON, "stages/index.py", "--params", str(params), *inputs, "--out", str(out)],
        env={"TMPDIR": str(small)} if where == "tmpdir" else {}, output=out))


MILVUS_CASES = [
    Case("milvus-unreachable", "index", "index.backend milvus at a URI nothing listens on (3 tries of 10 s)",
         lambda p: stage_with(p, "index", "milvus-unreachable", **{"index.backend": "milvus",
                                                                   "index.uri": f"http://127.0.0.1:{free_port()}"}),
         "index.uri"),
    ("milvus-lite-elsewhere", "index", "index.uri a path outside the index folder", "index.uri",
     {"index.backend": "milvus", "index.uri": "/tmp/elsewhere"}),
    ("milvus-missing-collection", "predict", "predict with a Milvus labels' index whose collection is not there",
     "labels:collection", milvus_labels(json_edited("meta.json", collection="raexmc_gone"))),
    ("milvus-other-count", "predict", "predict with a Milvus labels' index whose reference says another count",
     "labels:collection", milvus_labels(json_edited("meta.json", count=99))),
    ("milvus-other-dimension", "predict", "predict with a Milvus labels' index whose reference says another dim",
     "labels:collection", milvus_labels(json_edited("meta.json", dim=40))),
    ("milvus-corrupt-lite", "predict", "predict with a Milvus labels' index whose Lite manifests are garbled",
     "labels/milvus.db", milvus_labels(garble_milvus_lite)),
    Case("milvus-server-dies", "predict", "predict --scores-out with the labels on a Milvus Lite server process "
         "killed (SIGKILL) mid-search", milvus_server_dies, "labels:uri"),
    Case("milvus-lite-disk-full", "index", "index.backend milvus writing its Lite folder onto an 8 KiB tmpfs",
         lambda p: milvus_lite_disk_full(p, "out"), "index/inputs/milvus.db"),
    Case("milvus-lite-full-tmpdir", "index", "index.backend milvus with TMPDIR, where Milvus Lite builds, on an "
         "8 KiB tmpfs", lambda p: milvus_lite_disk_full(p, "tmpdir"), "index.uri")]

PROBE_60_CASES = [
    ("catalogue-path-number", "download", "a local catalogue entry with path: 5", "datasets/tiny.yaml:path",
     {"datasets.tiny": {"source": "local", "path": 5}}),
    Case("catalogue-test-fraction", "download", "a foldoc catalogue entry with test_fraction: 1.5",
         lambda p: stage_with(p, "download", "catalogue-test-fraction",
                              **{"datasets.tiny": {**foldoc_entry(p), "test_fraction": 1.5}}),
         "datasets/tiny.yaml:test_fraction"),
    ("model-key-nan", "predict", "predict with a model folder whose inputs/keys.npy holds a NaN", "inputs/keys.npy",
     nan_key),
    ("model-index-dimension", "predict", "predict with both of the model's indexes 8 dimensions wider", "model/inputs",
     wider_index("inputs", "labels")),
    ("model-labels-index-dimension", "predict", "predict with the model's labels' index 8 dimensions wider",
     "model/labels", wider_index("labels")),
    Case("embed-int8-full-tmpdir", "embed", "embed.precision int8 with TMPDIR on a 1 MiB tmpfs",
         int8_on_full_tmpdir, "fp32.onnx")]


def cases() -> list[Case]:
    return [case_of(row) for row in [
        ("rel-abc", "download", "LF target_rel \"abc\"", "trn.json.gz:2",
         edit_record("trn.json.gz", 1, target_rel=["abc", 0.5])),
        ("rel-nan", "download", "LF target_rel NaN", "trn.json.gz:2",
         edit_record("trn.json.gz", 1, target_rel=[float("nan"), 0.5])),
        ("rel-inf", "download", "LF target_rel inf", "trn.json.gz:2",
         edit_record("trn.json.gz", 1, target_rel=[float("inf"), 0.5])),
        ("rel-negative", "download", "LF target_rel -1", "tst.json.gz:1",
         edit_record("tst.json.gz", 0, target_rel=[-1.0])),
        Case("ngame-rel-abc", "download", "NGAME j:v with v = abc", ngame_bad_value, "trn_X_Y.txt:"),
        ("test-no-positives", "download", "every test row has no target_ind", "tst.json.gz", empty_test_split),
        ("target-out-of-range", "download", "a target_ind beyond the label count", "trn.json.gz:3",
         edit_record("trn.json.gz", 2, target_ind=[99], target_rel=[1.0])),
        ("json-broken-line", "download", "a line of trn.json.gz that is not JSON", "trn.json.gz:1",
         lambda lf: (lf / "trn.json.gz").write_bytes(gzip.compress(b'{"uid": "t0", \n'))),
        ("labels-missing", "download", "lbl.json.gz missing", "lbl.json.gz", lambda lf: (lf / "lbl.json.gz").unlink()),
        Case("tokenize-10mb-input", "tokenize", "one 10 MB input (must succeed within 50 MB of the clean peak)",
             tokenize_rss, "", expect_failure=False),
        ("embed-batch-0", "embed", "embed.batch_size 0", "embed.batch_size", {"embed.batch_size": 0}),
        ("embed-batch-negative", "embed", "embed.batch_size -1", "embed.batch_size", {"embed.batch_size": -1}),
        ("embed-int8", "embed", "embed.dtype int8", "embed.dtype", {"embed.dtype": "int8"}),
        Case("mlflow-corrupt", "download", "mlflow.db is not a database", corrupt_store, "mlflow.db"),
        Case("disk-full", "download", "download onto a full disk (8 KiB tmpfs)", disk_full, "small"),
        Case("leftover-tmp", "download", "a killed stage's .tmp folder is removed by the next run",
             stale_leftover, "", expect_failure=False),
        ("params-lambda-2", "tune", "infer.lambda 2 (outside 0..1)", "infer.lambda", {"infer.lambda": 2}),
        ("params-unknown-dataset", "download", "data.name names no dataset", "nope", {"data.name": "nope"}),
        ("target-twice", "download", "a target_ind listing one label twice", "trn.json.gz:3",
         edit_record("trn.json.gz", 2, target_ind=[2, 2], target_rel=[1.0, 1.0])),
        ("params-unknown-key", "download", "infer.lamda (a typo) in params.yaml", "infer.lamda", {"infer.lamda": 0.3}),
        ("b-sweep-float", "evaluate", "infer.b_sweep [2.7]", "infer.b_sweep", {"infer.b_sweep": [2.7]}),
        ("b-sweep-text", "evaluate", "infer.b_sweep [4, abc]", "infer.b_sweep", {"infer.b_sweep": [4, "abc"]}),
        ("lambda-sweep-text", "evaluate", "infer.lambda_sweep [0, abc] in evaluate", "infer.lambda_sweep",
         {"infer.lambda_sweep": [0, "abc"]}),
        ("ef-search-negative", "evaluate", "infer.ef_search -1 in evaluate", "infer.ef_search",
         {"infer.ef_search": -1}),
        ("package-ef-search-negative", "package", "infer.ef_search -1 in package", "infer.ef_search",
         {"infer.ef_search": -1, "package.register": False}),
        ("propensity-one-number", "evaluate", "evaluate.propensity [0.55]", "evaluate.propensity",
         {"evaluate.propensity": [0.55]}),
        ("propensity-negative", "tune", "evaluate.propensity [-1, -2] in tune", "evaluate.propensity",
         {"evaluate.propensity": [-1, -2]}),
        ("memory-seed-negative", "memory", "memory.seed -1 (keep 0.5, random)", "memory.seed",
         {"memory.seed": -1, "memory.keep": 0.5, "memory.method": "random"}),
        ("val-seed-negative", "tune", "infer.val_seed -1", "infer.val_seed", {"infer.val_seed": -1}),
        ("embed-threads-negative", "embed", "embed.threads -2", "embed.threads", {"embed.threads": -2}),
        ("embed-device-bad", "embed", "embed.device gpu0", "embed.device", {"embed.device": "gpu0"}),
        Case("predict-device-bad", "predict", "raexmc predict --device gpu0",
             lambda p: predict(p, "--device", "gpu0", "python"), "--device"),
        ("embeddings-truncated", "index", "embeddings train.npy cut in half (index)", "train.npy",
         {"embeddings": truncate("train.npy")}),
        ("embeddings-pickle", "index", "embeddings labels.npy holding text (index)", "labels.npy",
         {"embeddings": overwrite("labels.npy", b"hello")}),
        ("tokens-truncated", "embed", "token cache train.ids.npy cut in half (embed)", "train.ids.npy",
         {"tokens": truncate("train.ids.npy")}),
        ("labels-matrix-truncated", "tune", "data Y_train.npz cut in half (tune)", "Y_train.npz",
         {"dataset": truncate("Y_train.npz")}),
        ("memory-json-broken", "package", "memory.json not valid JSON (package; evaluate reads its folder)",
         "memory.json", {"memory": overwrite("memory.json", b'{"keep": 1.0')}),
        ("predictor-manifest-broken", "evaluate", "the package's manifest.json not valid JSON (evaluate)",
         "manifest.json", {"predictor": overwrite("manifest.json", b'{"f')}),
        ("per-instance-truncated", "significance", "eval per_instance.npz cut in half (significance)",
         "per_instance.npz", {"eval": truncate("per_instance.npz")}),
        Case("compare-with-nan", "significance", "significance.compare_with: a per_instance.npz of NaN",
             lambda p: compare_with(p, "compare-nan", per_instance_edited(lambda a: np.full_like(a, np.nan))),
             "per_instance.npz"),
        Case("compare-with-shorter", "significance", "significance.compare_with: a run with one test query fewer",
             lambda p: compare_with(p, "compare-shorter", per_instance_edited(lambda a: a[:-1])),
             "other/per_instance.npz"),
        ("significance-metric-unknown", "significance", "significance.metrics [P@7] (evaluate has no P@7)",
         "significance.metrics", {"significance.metrics": ["P@7"]}),
        ("embed-model-missing", "embed", "embed --model: the train stage's folder missing", "model",
         {"model": shutil.rmtree}),
        ("package-b-zero", "package", "infer.b 0 in package", "infer.b", {"infer.b": 0, "package.register": False}),
        ("compare-with-missing", "significance", "significance.compare_with: a path that does not exist",
         "/nonexistent/per_instance.npz", {"significance.compare_with": "/nonexistent/per_instance.npz"}),
        Case("alias-unknown", "serve", "raexmc serve --alias nope",  # one line before any server starts
             lambda p: p.run([PYTHON, "-m", "raexmc.cli", "serve", "--alias", "nope", "--port", str(free_port())]),
             "nope"),
        Case("tokenizer-python-only", "tokenize", "encoder.name with no fast tokenizer (ByT5's)", python_only_tokenizer,
             "encoder.name"),
        Case("tokenize-disk-full", "tokenize", "tokenize 8 MiB of token ids onto a 1 MiB tmpfs",
             lambda p: memmap_on_full_disk(p, "tokenize_texts"), "tokens/train.ids.npy"),
        Case("embed-disk-full", "embed", "embed 4 MiB of vectors onto a 1 MiB tmpfs",
             lambda p: memmap_on_full_disk(p, "embed"), "embeddings/train.npy"),
        Case("killed-stage-run-cache", "dvc repro", "evaluate killed mid-write, then restored from DVC's run cache: "
             "no temp may stay", killed_then_restored, "", expect_failure=False),
        Case("killed-package-run-cache", "dvc repro", "package killed (kill -9) mid-write, then restored from DVC's "
             "run cache: no temp or scratch may stay", lambda p: killed_then_restored(p, "package", "predictor"), "",
             expect_failure=False),
    ] + SCORE_FILE_CASES + PROBE_50_CASES + ONE_LINE_FAULT_CASES \
        + PROBE_60_CASES + MODEL_FOLDER_CASES + (MILVUS_CASES if importlib.util.find_spec("pymilvus") else [])]


def verdict(case: Case, outcome: Outcome) -> str:
    if outcome.code == -1:
        return "skipped"
    if not case.expect_failure:
        success = outcome.code in (0, 200) and case.names in outcome.last_line  # a server's answer: its label counts
        return "ok" if success and not outcome.traceback and not outcome.output_left else "FAIL"
    if case.name.startswith("serve-"):
        right = outcome.code == case.http_status and case.names in outcome.last_line
        return "ok" if right and not outcome.traceback else "FAIL"
    one_line = outcome.code not in (0,) and not outcome.traceback and case.names in outcome.last_line
    return "ok" if one_line and not outcome.output_left else "FAIL"
