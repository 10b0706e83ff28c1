"""A real `dvc repro` of the whole DAG in a fresh git repo, on a tiny dataset, and what DVC and MLflow make of it:
reruns, experiments, a sweep, two experiments started together in one workspace, killed runs, the package stage on
a GPU run's exact indexes, a fresh clone that reproduces the committed lock, DVC's metrics and plots views. All but
the failed download and the artifact are slow: the default run leaves them out, CI runs them in its second step."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from ruamel.yaml import YAML

from raexmc.encoder.vectors import load_embeddings
from raexmc.memory.indexes import build_memory_indexes
from raexmc.memory.persistence import saved_meta
from raexmc.rae.model import RaeModel
from tests.helpers import REPO, dvc, set_dataset, set_params, sh


def changed_stages(repo: Path) -> set[str]:
    """Stages `dvc status` would rerun, besides track (always_changed: it runs every time)."""
    return set(json.loads(dvc("status", "--json", cwd=repo).stdout)) - {"track"}


@pytest.mark.slow
def test_repro_runs_the_whole_dag_warns_of_nothing_and_ends_with_its_headline(reproduced_once, reproduced_project,
                                                                             tiny_model):
    """A zero-shot `dvc repro` printed DVC's "'artifacts/tiny/checkpoints' is empty" (and curves) and MLflow's
    CloudPickle warning, and ended without its numbers. The track stage, last, now prints the headline."""
    printed = reproduced_once.output
    assert "is empty" not in printed and "CloudPickle" not in printed, printed
    track = printed.split("> python stages/track.py")[1].split("Updating lock file")[0].splitlines()[1:]
    headline = [line for line in track if line.strip()]
    assert 3 <= len(headline) <= 12 and headline[0].startswith("λ = "), track
    assert headline[1].split()[:6] == ["method", "P@1", "P@5", "nDCG@5", "PSP@5", "R@100"]
    assert {line.split()[0] for line in headline[2:]} >= {"rae", "dual_encoder", "knn"}
    lock = (reproduced_once.repo / "dvc.lock").read_text()
    empty = "md5: d751713988987e9331980363e24189ce.dir"  # an empty folder's: the placeholders are ignored
    for output in ("checkpoints", "curves"):
        assert f"path: artifacts/tiny/{output}\n      hash: md5\n      {empty}" in lock, output
    project = reproduced_project
    for path in ("data/tiny/stats.json", "artifacts/tiny/tokens/train.ids.npy", "artifacts/tiny/embeddings/test.npy",
                 "artifacts/tiny/index/inputs/meta.json", "artifacts/tiny/index/labels/meta.json",
                 "artifacts/tiny/eval/metrics.json", "artifacts/tiny/eval/per_instance.npz",
                 "artifacts/tiny/scores/rae.npz", "artifacts/tiny/model/sentence_bert_config.json",
                 "artifacts/tiny/significance.json",
                 "artifacts/tiny/predictor/settings.json", "artifacts/tiny/tune/selection.json"):
        assert (project / path).is_file(), path
    encoder_settings = json.loads((project / "artifacts/tiny/model/sentence_bert_config.json").read_text())
    assert encoder_settings == {"max_seq_length": 16, "do_lower_case": False}, "the token cache's input max length"
    index = sorted(p.name for p in (project / "artifacts/tiny/index").iterdir())
    assert index == ["inputs", "labels"], "every key is indexed once: no joint index"
    memory = sorted(p.name for p in (project / "artifacts/tiny/memory").iterdir())
    assert memory == ["memory.json"], "memory.keep 1 searches index/inputs: no second copy"
    chosen = json.loads((project / "artifacts/tiny/tune/selection.json").read_text())
    packaged = json.loads((project / "artifacts/tiny/predictor/settings.json").read_text())
    evaluated = json.loads((project / "artifacts/tiny/eval/metrics.json").read_text())["selection"]
    assert chosen["auto"] == {"lambda": True, "tau": False, "retrieval": True, "label_share": True}  # the defaults
    assert (packaged["lambda"], packaged["tau"]) == (evaluated["lambda"], evaluated["tau"]) == (chosen["lambda"], 0.04)
    assert changed_stages(project) == set()  # dvc.yaml's metrics rows: test_dvc_s_metrics_and_plots_views_...

    client = MlflowClient(reproduced_once.store)
    runs = client.search_runs([client.get_experiment_by_name("rae-xmc").experiment_id])
    assert len(runs) == 1, "all stages log into one run per pipeline execution"
    metrics = runs[0].data.metrics
    assert metrics["download/N_train"] == 4 and "tokenize/duration_s" in metrics
    assert metrics["evaluate/selection.lambda"] == chosen["lambda"] and "tune/val_value" in metrics
    assert "significance/rae_vs_knn.P_at_1.log10_p" in metrics  # evaluate's below, against metrics.json
    assert runs[0].data.params["encoder.name"] == str(tiny_model)
    assert runs[0].data.params["encoder.pooling"] == "mean pooling, normalised", "a plain model: the paper's pooling"
    saved = json.loads((project / "artifacts/tiny/model/modules.json").read_text())
    assert [module["type"].rsplit(".", 1)[1] for module in saved] == ["Transformer", "Pooling", "Normalize"]
    used = [runs[0].data.params[key] for key in ("embed.batch_size", "embed.batch_size_used",
                                                 "train.embed_batch_size", "train.embed_batch_size_used")]
    assert used == ["auto", "256", "auto", "256"], "auto is 256 texts a call on CPU, and the run says so"
    assert str(client.get_model_version_by_alias("raexmc-tiny", "candidate").run_id) == runs[0].info.run_id
    # `raexmc evaluate` of the packaged folder gives the evaluate stage's metrics to every digit, which the run that
    # the alias `candidate` names (registered after evaluate) carries
    sh(str(Path(sys.executable).parent / "raexmc"), "evaluate", "--model", "artifacts/tiny/predictor", "--dataset",
       "data/tiny", "--out", "cli.json", cwd=project)
    stage, ours = (json.loads((project / name).read_text())
                   for name in ("artifacts/tiny/eval/metrics.json", "cli.json"))
    for name in ("rae", "dual_encoder", "knn", "memory", "propensity", "retrieval", "served"):
        assert ours[name] == stage[name], name
    assert (metrics["evaluate/rae.P_at_1"], metrics["evaluate/knn.tau"]) == (stage["rae"]["P@1"], stage["knn"]["tau"])
    assert "package/duration_s" in metrics and metrics["embed/train.texts"] == 4
    embeddings = project / "artifacts/tiny/embeddings/train.npy"  # a link into the cache, not a second copy
    assert embeddings.is_symlink() or embeddings.stat().st_nlink >= 2, "cache.type in .dvc/config"

    dvc("repro", "--force", "--single-item", "embed", cwd=project)  # the same embeddings, so the same output
    assert changed_stages(project) == set(), "a rerun of embed must not make the index stale"

    set_params(project, **{"train.lr": 3e-4})
    assert changed_stages(project) == {"train"}, "train.* reruns training (DVC then goes on downstream)"
    set_params(project, **{"train.lr": "auto", "unrelated.knob": 1})
    assert changed_stages(project) == set(), "an unrelated param must not rerun anything"
    params = YAML().load(project / "params.yaml")
    del params["unrelated"]  # gone before a stage runs: the settings refuse a key they do not know
    YAML().dump(params, project / "params.yaml")
    set_params(project, **{"infer.lambda": 0.3})
    assert changed_stages(project) == {"tune"}, "λ reruns the choice (then evaluate and package), nothing before it"
    set_params(project, **{"infer.lambda": "auto", "infer.b": 100})
    # b is the packaged model's: evaluate reruns after package, on the folder it measures
    assert changed_stages(project) == {"tune", "package"}, "infer.* reruns only what follows the index"
    set_params(project, **{"infer.b": 200, "tokenize.input_max_len": 32})
    assert changed_stages(project) == {"tokenize", "package"}, "queries are cut at the inputs' max length"
    set_params(project, **{"tokenize.input_max_len": 16, "encoder.name": "all-MiniLM-L6-v2"})
    assert changed_stages(project) == {"tokenize", "train"}

    # label prototypes (memory.prototypes auto at keep < 1: α chosen by tune) need graphs: hnsw, where auto is exact
    # at 9 keys; a grid of one α > 0 widens by doubling and halving, never to 0, so the memory has prototypes
    set_params(project, **{"encoder.name": str(tiny_model), "memory.keep": 0.5, "memory.method": "kmeans-labels",
                           "index.backend": "hnsw", "memory.prototypes_grid": [0.5]})
    # (package reads index.*: it builds the graphs predict needs where the index stage built none)
    assert changed_stages(project) == {"index", "memory", "tune", "package"}, \
        "memory.* leaves download, tokenize, train, embed"
    dvc("repro", cwd=project)
    assert changed_stages(project) == set()
    kept = json.loads((project / "artifacts/tiny/memory/memory.json").read_text())
    assert (kept["input_keys"], kept["num_inputs"], kept["index"]) == (2, 4, "inputs")
    packaged = json.loads((project / "artifacts/tiny/predictor/settings.json").read_text())
    evaluated = json.loads((project / "artifacts/tiny/eval/metrics.json").read_text())["memory"]
    chosen = json.loads((project / "artifacts/tiny/tune/selection.json").read_text())
    alpha = json.loads((project / "artifacts/tiny/tune/memory_choice.json").read_text())["prototypes"]
    assert alpha == chosen["prototypes"] > 0 and chosen["auto"]["prototypes"] is True
    assert {0.25, 0.5, 1.0} <= {row["prototypes"] for row in chosen["prototypes_curve"]}, "widened both ways"
    assert packaged["about"]["memory"] == evaluated == {"keep": 0.5, "method": "kmeans-labels", "prior": False,
                                                        "input_keys": 2, "compression": "none",
                                                        "prototypes": alpha}  # tune's choice
    assert (project / "artifacts/tiny/predictor/labels/meta.json").is_file(), "RAE's label prototypes travel with it"
    set_params(project, **{"memory.prototypes_grid": [0.5, 1]})
    assert changed_stages(project) == {"tune"}, "memory builds the α tune chose, not the grid"
    set_params(project, **{"memory.prototypes_grid": [0.5]})
    assert packaged["about"]["memory"]["input_keys"] == 2
    assert (project / "artifacts/tiny/predictor/inputs/meta.json").is_file()
    set_params(project, **{"memory.compression": "sq8-m4"})
    assert changed_stages(project) == {"memory"}, "compression leaves everything up to index, and tune, as they are"


@pytest.mark.slow
def test_repro_with_keep_auto_builds_the_keep_tune_chose(project):
    """memory.keep auto on a small synthetic dataset: tune chooses the keep from the grid on held-out training
    inputs and writes the curve, the memory stage (after tune: it depends on tune's memory_choice.json) builds that
    keep, and evaluate searches it. The grid is tune's alone: changing it reruns tune, not memory."""
    set_dataset(project, "synthetic-keep", {"source": "synthetic", "n_train": 400, "n_test": 50, "n_labels": 100,
                                            "labels_per_input": 2, "input_words": [4, 8], "label_words": [3, 5],
                                            "topic_size": 16, "seed": 0})
    set_params(project, **{"data.name": "synthetic-keep", "memory.keep": "auto", "memory.keep_grid": [1.0, 0.5, 0.25],
                           "memory.method": "kmeans", "infer.val_fraction": 0.1})
    dvc("repro", "evaluate", cwd=project)
    artifacts = project / "artifacts/synthetic-keep"
    chosen = json.loads((artifacts / "tune/selection.json").read_text())
    curve = chosen["keep_curve"]
    assert [row["keep"] for row in curve][:3] == [1.0, 0.5, 0.25] and chosen["auto"]["keep"] is True
    assert chosen["keep"] in [row["keep"] for row in curve] and chosen["memory_inputs"] == 360
    best = max(row[chosen["metric"]] for row in curve)
    assert chosen["val_value"] == best == max((row[chosen["metric"]], row["keep"]) for row in curve)[0]
    built = json.loads((artifacts / "memory/memory.json").read_text())
    assert (built["keep"], built["input_keys"]) == (chosen["keep"], int(chosen["keep"] * 400 + 0.5))
    assert json.loads((artifacts / "eval/metrics.json").read_text())["memory"]["keep"] == chosen["keep"]
    lock = YAML(typ="safe").load((project / "dvc.lock").read_text())["stages"]
    assert "artifacts/synthetic-keep/tune/memory_choice.json" in [dep["path"] for dep in lock["memory"]["deps"]]
    not_run = {"significance", "package"}
    assert changed_stages(project) - not_run == set()
    set_params(project, **{"memory.keep_grid": [1.0, 0.1]})
    assert changed_stages(project) - not_run == {"tune"}, "memory reads the keep tune chose, not the grid"


def test_failed_stage_exits_2_and_leaves_no_output(project, tmp_path):
    (tmp_path / "lf" / "lbl.json.gz").write_bytes(b"\x1f\x8b broken")
    proc = dvc("repro", "download", cwd=project, check=False)
    assert proc.returncode != 0
    assert "DataError: " in proc.stderr + proc.stdout and "lbl.json.gz" in proc.stderr + proc.stdout
    assert not (project / "data/tiny").exists()


@pytest.mark.slow
def test_temp_experiment_logs_into_the_project_store(project, monkeypatch):
    """`dvc exp run --temp` runs in a copy under .dvc/tmp/exps; its run must land in <project>/mlflow.db."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    dvc("exp", "run", "--temp", "-n", "tiny-temp", "-S", "infer.lambda=0.3", "download", cwd=project)
    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("rae-xmc").experiment_id])
    assert [r.data.tags["dvc_experiment"] for r in runs] == ["tiny-temp"]
    assert runs[0].data.metrics["download/N_train"] == 4
    assert not list((project / ".dvc" / "tmp").rglob("mlflow.db")), "no store inside the temporary copy"


@pytest.mark.slow
def test_killed_training_resumes_from_its_checkpoint(project):
    """SIGKILL a real fine-tuning run once a checkpoint exists; the rerun resumes and finishes."""
    set_params(project, **{"encoder.mode": "fine-tuned", "train.batch_size": 2, "train.max_steps": 150,
                           "train.hnm_steps": 100, "train.hnm_topk": 3, "train.checkpoint_every": 5,
                           "train.val_fraction": 0.25, "train.val_b": 10, "train.embed_batch_size": 4})
    dvc("repro", "tokenize", cwd=project)
    command = [sys.executable, "stages/train.py", "--dataset", "data/tiny", "--tokens", "artifacts/tiny/tokens",
               "--out", "artifacts/tiny/model", "--checkpoints", "artifacts/tiny/checkpoints",
               "--curves", "artifacts/tiny/curves"]
    checkpoint = project / "artifacts/tiny/checkpoints/last.pt"
    proc = subprocess.Popen(command, cwd=project, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not checkpoint.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.kill()
    proc.wait()
    import torch

    killed_at = torch.load(checkpoint, weights_only=False)["step"]
    assert 0 < killed_at < 150, "the run must die part-way, after a checkpoint"
    assert not (project / "artifacts/tiny/model").exists(), "a killed run leaves no model behind"
    rerun = sh(*command, cwd=project)
    assert f"at step {killed_at}" in rerun.stderr, "the rerun resumes from the checkpoint"
    assert torch.load(checkpoint, weights_only=False)["step"] == 150
    assert (project / "artifacts/tiny/model/model.safetensors").is_file()
    curve = json.loads((project / "artifacts/tiny/curves/training_curve.json").read_text())
    assert curve[-1]["step"] == 150 and "val_rae_P@1" in curve[-1] and "elapsed_s" in curve[-1]


@pytest.mark.slow
def test_a_killed_stage_restored_from_the_run_cache_leaves_no_temporary(reproduced_project):
    """SIGKILL evaluate while it writes its output; `dvc repro` then restores evaluate from the run cache without
    running it, so the next stage that runs (track, every time) must remove the killed run's temporary folder."""
    project, artifacts = reproduced_project, reproduced_project / "artifacts" / "tiny"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    rerun = subprocess.Popen([sys.executable, "-m", "dvc", "repro", "--force", "--single-item", "evaluate"],
                             cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while not (temps := list(artifacts.glob(".eval.*.tmp"))) and rerun.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert temps, "evaluate ended before it could be killed while writing"
    os.kill(int(temps[0].name.removeprefix(".eval.").partition("-")[0]), signal.SIGKILL)
    output, _ = rerun.communicate(timeout=300)
    assert rerun.returncode != 0 and temps[0].is_dir(), output

    restored = dvc("repro", cwd=project)
    assert "Stage 'evaluate' is cached - skipping run" in restored.stdout, restored.stdout
    assert (artifacts / "eval" / "metrics.json").is_file()
    left = [path for folder in ("data", "artifacts") for path in (project / folder).rglob(".*.tmp")]
    assert left == []


@pytest.mark.slow
def test_sweep_runs_a_queued_grid_into_one_store(reproduced_project, monkeypatch):
    """`raexmc sweep` queues a grid, runs it with DVC's queue workers and waits; every experiment lands in the
    project's MLflow store with the numbers `dvc exp show` has (the run cache serves the unchanged stages)."""
    project = reproduced_project
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    # YAML 1.2 exponents are floats for DVC and for our params loader alike. tau=0.04 is the
    # workspace's value: DVC restores its evaluate stage from the run cache, and the track stage
    # must still put the metrics into that experiment's MLflow run.
    sweep = sh(str(Path(sys.executable).parent / "raexmc"), "sweep", "-S", "infer.tau=4e-2,1e-1", "-j", "2",
               cwd=project)
    assert "compare-runs?runs=" in sweep.stdout and "2 success" in sweep.stderr
    shown = json.loads(dvc("exp", "show", "--json", cwd=project).stdout)
    by_name = {e["name"]: e["revs"][0]["data"] for commit in shown for e in commit.get("experiments") or []}
    assert len(by_name) == 2 and all(name in sweep.stdout for name in by_name)
    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("rae-xmc").experiment_id])
    for name, data in by_name.items():
        run = next(r for r in runs if r.data.tags["dvc_experiment"] == name)
        rae = data["metrics"]["metrics/tiny/rae.json"]["data"]  # RAE's headline row
        assert run.data.metrics["evaluate/rae.P_at_1"] == rae["P@1"]
        assert float(run.data.params["infer.tau"]) == float(data["params"]["params.yaml"]["data"]["infer"]["tau"])
    assert {float(r.data.params["infer.tau"]) for r in runs if r.data.tags["dvc_experiment"] in by_name} == {0.04, 0.1}
    assert "candidate" not in client.get_registered_model("raexmc-tiny").aliases, "a sweep leaves serving alone"
    # tau=0.1 changed what the package stage reads, so that experiment registered a version under
    # its own name (tau=0.04's package stage was restored from the run cache: nothing new to register).
    changed = next(name for name, data in by_name.items()
                   if data["params"]["params.yaml"]["data"]["infer"]["tau"] == 0.1)
    version = client.get_model_version_by_alias("raexmc-tiny", changed)
    assert client.get_run(version.run_id).data.tags["dvc_experiment"] == changed


@pytest.mark.slow
def test_an_experiments_track_stage_names_the_alias_that_serves_it(reproduced_project):
    """An experiment registers the predictor under its own name as alias: the track stage's line must name
    `--alias <experiment>`, the alias `raexmc serve` looks up; a `dvc repro` of the workspace keeps the plain one."""
    project, stages = reproduced_project, YAML(typ="safe").load(reproduced_project / "dvc.yaml")["stages"]
    package, track = (stages[name]["cmd"].replace("${data.name}", "tiny").split() for name in ("package", "track"))
    experiment = {**os.environ, "DVC_EXP_NAME": "tiny-exp"}
    assert "registered" not in sh(*track, cwd=project, env=experiment).stderr, "nothing new in that execution"
    sh(*package, cwd=project, env=experiment)
    said = sh(*track, cwd=project, env=experiment).stderr
    assert "serve it with `raexmc serve --alias tiny-exp`" in said, said
    from raexmc.pipeline.serving import registered_uri

    assert registered_uri("raexmc-tiny", "tiny-exp") == "models:/raexmc-tiny@tiny-exp"
    sh(*package, cwd=project)  # the project was committed after its repro: a new execution, as the experiment's
    workspace = sh(*track, cwd=project).stderr
    assert "serve it with `raexmc serve`" in workspace, workspace


# On a GPU the index stage keeps exact indexes (index.backend auto) and evaluate searches there; the package
# stage then builds the HNSW graphs that predict and serve search on the CPU. Here a real reproduced project's
# index folder is replaced by the exact one such a run keeps, and the real package stage packages it.
@pytest.mark.slow
def test_package_builds_the_graphs_a_gpu_run_left_out_and_predicts_as_the_index_stage_s(reproduced_project, tmp_path):
    project = reproduced_project
    artifacts = project / "artifacts/tiny"
    queries = np.asarray(load_embeddings(artifacts / "embeddings", "test")[:20])
    reference = RaeModel.load(artifacts / "predictor").search.search(queries, 10)
    shutil.rmtree(artifacts / "index")
    build_memory_indexes(artifacts / "embeddings", artifacts / "index", "exact", progress=False)  # what a GPU run keeps
    set_params(project, **{"package.register": False, "index.backend": "hnsw"})
    sh(sys.executable, "stages/package.py", "--dataset", "data/tiny", "--model", "artifacts/tiny/model",
       "--embeddings", "artifacts/tiny/embeddings", "--index", "artifacts/tiny/index", "--tune", "artifacts/tiny/tune",
       "--memory", "artifacts/tiny/memory", "--out", "artifacts/tiny/predictor", cwd=project,
       env={**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"})
    packaged = artifacts / "predictor"
    assert [saved_meta(packaged / key_set)["backend"] for key_set in ("inputs", "labels")] == ["hnsw", "hnsw"]
    assert not list(packaged.glob("*/keys.npy")), "graphs hold their keys"
    search = RaeModel.load(packaged).search
    assert {search.inputs.backend, search.labels.backend} == {"hnsw"}
    np.testing.assert_array_equal(search.search(queries, 10)[0], reference[0])


REFUSAL = "ConcurrentRunError: "


def start_experiment(repo, name: str, lam: float) -> subprocess.Popen:
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.Popen([sys.executable, "-m", "dvc", "exp", "run", "-n", name, "-S", f"infer.lambda={lam}"],
                            cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
def test_two_workspace_experiments_never_mislabel_results(reproduced_project, monkeypatch):
    project = reproduced_project
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    own = {"lam03": 0.3, "lam07": 0.7}
    first = start_experiment(project, "lam03", 0.3)
    time.sleep(1)  # the second starts while the first is under way (DVC is still checking its stages)
    second = start_experiment(project, "lam07", 0.7)
    outputs = {name: proc.communicate(timeout=600)[0] for name, proc in (("lam03", first), ("lam07", second))}
    codes = {"lam03": first.returncode, "lam07": second.returncode}

    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("rae-xmc")  # None where neither got as far as logging
    runs = client.search_runs([experiment.experiment_id]) if experiment else []
    for run in runs:
        name = run.data.tags["dvc_experiment"]
        if name in own:
            assert float(run.data.params["infer.lambda"]) == own[name], f"MLflow run {name} holds another λ"
            if run.info.status == "FINISHED":
                assert run.data.metrics.get("tune/lambda", own[name]) == own[name]
    for name, lam in own.items():
        try:
            version = client.get_model_version_by_alias("raexmc-tiny", name)
        except MlflowException:  # no alias: that experiment registered nothing
            continue
        assert float(client.get_run(version.run_id).data.params["infer.lambda"]) == lam, f"alias {name}"

    failed = [name for name, code in codes.items() if code != 0]
    assert failed, f"one workspace cannot run both: {outputs}"
    for name in failed:  # stopped by a stage of ours, or first by DVC itself (its lock, or its own
        # workspace checks: under load the race goes either way), never silently
        assert REFUSAL in outputs[name] or "ERROR: " in outputs[name], outputs[name]
    refusals = [line for out in outputs.values() for line in out.splitlines() if REFUSAL in line]
    assert all(line.startswith(REFUSAL) and "raexmc sweep" in line and "dvc exp run --queue" in line
               for line in refusals)


# A fresh clone (its own, empty DVC cache: nothing restored) reproduces the outputs its dvc.lock records: any time
# stamp, timing, absolute path or run-to-run variation in an output fails it. (Here, so that under --dist loadfile
# it shares this file's one reproduced project.)
def output_hashes(lock_path) -> dict[str, str]:
    """{output path: md5} of every stage's outs in a dvc.lock."""
    stages = YAML(typ="safe").load(lock_path)["stages"]
    return {out["path"]: out["md5"] for stage in stages.values() for out in stage.get("outs", [])}


@pytest.mark.slow
def test_a_fresh_clone_reproduces_the_committed_lock(reproduced_once, tmp_path, download_cache):
    source = reproduced_once.repo
    clone = tmp_path / "clone"
    sh("git", "clone", "-q", str(source), str(clone), cwd=tmp_path)
    assert not (clone / ".dvc" / "cache").exists(), "the clone starts with no DVC cache and no run cache"
    before = json.loads(dvc("metrics", "show", "--json", cwd=clone).stdout)[""]["data"]
    assert "P@1" in before["metrics/tiny/rae.json"]["data"], "git holds the headline: it shows before any repro or pull"
    env = {name: value for name, value in os.environ.items() if name not in ("DVC_ROOT", "DVC_EXP_NAME")}
    dvc("repro", cwd=clone, env={**env, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
                                 "RAEXMC_CACHE": str(download_cache)})

    committed, reproduced = output_hashes(source / "dvc.lock"), output_hashes(clone / "dvc.lock")
    assert len(committed) >= 12 and {"artifacts/tiny/index", "artifacts/tiny/eval"} <= set(committed)
    assert reproduced == committed
    assert set(json.loads(dvc("status", "--json", cwd=clone).stdout)) <= {"track"}, "track alone: always_changed"
    assert sh("git", "status", "--porcelain", cwd=clone).stdout == ""


def test_the_model_artifact_names_the_package_stage_s_folder():
    """DVC's model registry and `dvc artifacts get` read dvc.yaml's artifacts: the packaged model is one, at the
    folder the package stage writes (DVC resolves the templated path to the default dataset's)."""
    from dvc.repo import Repo

    repo = Repo(str(REPO))
    artifact = repo.artifacts.read()["dvc.yaml"]["predictor"]
    [package] = repo.stage.collect("package")
    assert artifact.type == "model" and artifact.desc
    assert artifact.path in [out.def_path for out in package.outs]
    assert artifact.path == f"artifacts/{YAML(typ='safe').load(REPO / 'params.yaml')['data']['name']}/predictor"


@pytest.mark.slow
def test_a_teammate_pulls_the_outputs_from_a_shared_remote_and_predicts_without_reproducing(reproduced_project,
                                                                                             tmp_path):
    """docs/comparing-runs.md's recipe: `dvc remote add -d`, commit, `dvc push`; a teammate's clone then
    `dvc pull`s every output (no stage runs) and has the same working model."""
    remote = tmp_path / "shared-remote"
    dvc("remote", "add", "-d", "team", str(remote), cwd=reproduced_project)
    # significance.json is no cached output (cache: false) under an ignored folder: git holds it, as the project's
    # artifacts/foldoc/significance.json
    sh("git", "add", "-f", ".dvc/config", "artifacts/tiny/significance.json", cwd=reproduced_project)
    sh("git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "the team's remote",
       cwd=reproduced_project)
    dvc("push", cwd=reproduced_project)
    clone = tmp_path / "teammate"
    sh("git", "clone", "-q", str(reproduced_project), str(clone), cwd=tmp_path)
    dvc("pull", cwd=clone)
    assert changed_stages(clone) == set(), "every output as the lock records it: nothing to rerun"
    texts = ["perl", "a small unix"]
    pulled = RaeModel.load(clone / "artifacts/tiny/predictor").predict(texts, k=3)[0]
    assert pulled == RaeModel.load(reproduced_project / "artifacts/tiny/predictor").predict(texts, k=3)[0]


@pytest.mark.slow
def test_dvc_s_metrics_and_plots_views_of_a_reproduced_project(reproduced_project, tmp_path):
    """`dvc metrics show`: the headline rows within 120 columns, p-values as text that reads as the number it is
    (never 0.0). `dvc plots show`: dvc.yaml's templates (a sweep's points joined by straight lines, bars per method
    for the label segments), and no training-curve panel (nor error) for the zero-shot run's empty curves folder.
    Fine-tuned, a diff against the zero-shot commit draws the train stage's validation P@1 for the trained run."""
    project = reproduced_project
    shown = dvc("metrics", "show", cwd=project).stdout
    assert max(len(line.rstrip()) for line in shown.splitlines()) <= 120, shown
    rows = {line.split()[0]: line.split()[1:] for line in shown.splitlines()[1:]}
    assert set(rows) == {f"metrics/tiny/{row}.json"
                         for row in ("rae", "dual_encoder", "knn", "rae_vs_dual_encoder", "rae_vs_knn")}
    assert shown.splitlines()[0].split() == ["Path", "P@1", "P@5", "PSP@5", "R@100", "lambda", "nDCG@5", "tau"]
    data = json.loads(dvc("metrics", "show", "--json", cwd=project).stdout)[""]["data"]
    report = json.loads((project / "artifacts/tiny/significance.json").read_text())
    full = json.loads((project / "artifacts/tiny/eval/metrics.json").read_text())
    assert data["metrics/tiny/knn.json"]["data"]["R@100"] == full["knn"]["R@100"]
    assert data["metrics/tiny/rae.json"]["data"]["lambda"] == full["selection"]["lambda"]
    for comparison in ("rae_vs_dual_encoder", "rae_vs_knn"):
        for metric, test in report[comparison].items():
            text = data[f"metrics/tiny/{comparison}.json"]["data"][metric]
            mantissa, exponent = text.split("e")
            assert math.log10(float(mantissa)) + int(exponent) == pytest.approx(test["log10_p"], abs=0.03), text

    plots = json.loads(dvc("plots", "show", "--json", cwd=project).stdout)
    assert "errors" not in plots, plots["errors"]
    assert [path for path in plots["data"] if "curves" in path] == []
    specs = {path: renderers[0]["content"] for path, renderers in plots["data"].items() if renderers}
    for sweep in ("lambda_sweep", "b_sweep", "lambda_selection"):
        spec = specs[f"artifacts/tiny/eval/{sweep}.json"]
        assert spec["mark"] == {"type": "line", "point": True, "tooltip": {"content": "data"}}, sweep
        assert "loess" not in json.dumps(spec), "no curve fitted to a sweep"
        assert spec["encoding"]["color"]["field"] == "field", "a colour per metric"
    bars = specs["artifacts/tiny/eval/segments_f1.json"]
    assert bars["mark"]["type"] == "bar" and bars["encoding"]["x"]["type"] == "nominal"
    assert bars["encoding"]["color"]["field"] == bars["encoding"]["xOffset"]["field"] == "method"
    assert {row["method"] for row in bars["data"]["values"]} == {"rae", "dual_encoder", "knn"}
    dvc("plots", "show", "--out", str(tmp_path / "html"), cwd=project)
    assert "segments_f1" in (tmp_path / "html" / "index.html").read_text()

    set_params(project, **{"encoder.mode": "fine-tuned", "train.batch_size": 2, "train.max_steps": 4,
                           "train.hnm_steps": 2, "train.hnm_topk": 3, "train.val_fraction": 0.25, "train.val_b": 10,
                           "train.embed_batch_size": 4})
    dvc("repro", "train", cwd=project)
    diff = json.loads(dvc("plots", "diff", "HEAD", "--json", cwd=project).stdout)
    assert "errors" not in diff, diff["errors"]
    [renderer] = diff["data"]["artifacts/tiny/curves/training_curve.json"]
    drawn = [(row["rev"], row["elapsed_s"], row["dvc_inferred_y_value"])
             for row in renderer["content"]["data"]["values"] if row["field"] == "val_rae_P@1"]
    written = json.loads((project / "artifacts/tiny/curves/training_curve.json").read_text())
    assert [row["step"] for row in written] == [0, 2, 4], "validation at each mining round and after the last step"
    assert drawn == [("workspace", row["elapsed_s"], row["val_rae_P@1"]) for row in written]
