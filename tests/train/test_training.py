"""Whole-program tests of training: train.py end to end, resume, signals, determinism, devices.

Runs use the `:smoke` fastText config on generated data (no network, no shared data).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import types

import jax
import numpy as np
import pytest

from jcaps.data.errors import DataError
from jcaps.errors import UserError
from jcaps.folder_lock import FolderInUse
from jcaps.train import loop
from jcaps.train.checkpoints import Checkpoints, keep_if_best
from jcaps.train.config import load
from tests.command_env import TEST_DEVICES, command_env, library_log_lines

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMOKE = os.path.join(ROOT, "configs", "fasttext_ag_news.py") + ":smoke"


def smoke_config(cache_dir, **overrides):
    config = load(SMOKE)
    config.data.cache_dir = str(cache_dir)
    config.train.progress = "none"
    for key, value in overrides.items():
        section, name = key.split("__")
        config[section][name] = value
    return config


def train_py(workdir, cache_dir, *flags, devices: int = 1, wait: bool = True, platforms: str | None = "cpu"):
    env = command_env(devices)
    if platforms is None:  # as a user runs it, JAX probing every backend it knows
        del env["JAX_PLATFORMS"]
    else:
        env["JAX_PLATFORMS"] = platforms
    command = [sys.executable, os.path.join(ROOT, "train.py"), "--config", SMOKE, "--workdir", str(workdir),
               f"--config.data.cache_dir={cache_dir}", "--config.train.progress=lines", *flags]
    if not wait:
        return subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)


def read_metrics(workdir) -> list[dict]:
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def train_losses(workdir) -> dict[int, float]:
    return {m["step"]: m["loss"] for m in read_metrics(workdir) if m["split"] == "train"}


def logged(workdir) -> list[tuple]:
    """(step, split, final) of each line of metrics.jsonl, in order."""
    return [(m["step"], m["split"], bool(m.get("final"))) for m in read_metrics(workdir)]


def files(workdir) -> dict[str, int]:
    """Every file of the workdir (but the lock, rewritten by each run) with its modification time."""
    return {
        os.path.relpath(os.path.join(root, name), workdir): os.stat(os.path.join(root, name)).st_mtime_ns
        for root, _, names in os.walk(workdir) for name in names if name != ".lock"
    }


@pytest.fixture(scope="session")
def reference_run(built_once, cache_dir):
    """An uninterrupted 1-device `train.py` run of the smoke config, once a session (`built_once`):
    (workdir, its output: stdout and stderr)."""

    def train(folder):
        result = train_py(folder / "workdir", cache_dir, "--config.train.checkpoint_every_steps=10")
        assert result.returncode == 0, result.stdout + result.stderr
        return {"stdout": result.stdout, "stderr": result.stderr}

    folder, output = built_once("training-reference", train)
    return folder / "workdir", types.SimpleNamespace(**output)


@pytest.mark.slow
def test_train_py_writes_the_workdir_and_learns(reference_run):
    workdir, result = reference_run
    for name in ("config.json", "checkpoints/vocab.json", "checkpoints/labels.json", "tensorboard"):
        assert os.path.exists(os.path.join(workdir, name)), name
    assert "steps/s" in result.stdout and "ETA" in result.stdout
    assert not library_log_lines(result.stderr), result.stderr
    # The summary: what was trained, the final model and metrics, where the files are.
    assert "trained to step 60: 60 steps in" in result.stdout
    assert "final model: step " in result.stdout
    for line in ("final validation: loss", "final test: loss", f"  workdir      {workdir}",
                 f"  checkpoints  {workdir / 'checkpoints'} (latest step 60)", f"  metrics      {workdir / 'metrics.jsonl'}",
                 f"  tensorboard  tensorboard --logdir {workdir / 'tensorboard'}"):
        assert line in result.stdout, line
    assert "Downloading and preparing" not in result.stdout + result.stderr
    finals = {m["split"]: m for m in read_metrics(workdir) if m.get("final")}
    assert set(finals) == {"validation", "test"}
    # Four balanced classes: chance is 0.25; the keywords make the task easy.
    assert finals["test"]["accuracy"] > 0.7
    losses = train_losses(workdir)
    assert losses[max(losses)] < losses[min(losses)]


@pytest.mark.slow
def test_evaluate_and_predict_need_only_the_workdir(reference_run):
    from jcaps.evaluate import evaluate
    from jcaps.predict import predict
    from jcaps.train.workdir import load_trained

    workdir, _ = reference_run
    metrics = evaluate(str(workdir), "test")
    final_test = [m for m in read_metrics(workdir) if m.get("final") and m["split"] == "test"][0]
    assert metrics["accuracy"] == pytest.approx(final_test["accuracy"], abs=1e-6)
    trained = load_trained(str(workdir))
    [result] = predict(trained, ["the striker scored a goal as the coach watched the champion"], top_k=2)
    assert result["label"] == "sports"
    assert len(result["probabilities"]) == 2
    assert result["probabilities"]["sports"] > 0.5


@pytest.mark.slow
def test_cli_predict_prints_json_lines(reference_run):
    workdir, _ = reference_run
    out = subprocess.run(
        [sys.executable, "-m", "jcaps.predict", "--workdir", str(workdir), "--text", "shares and profit rose", "--top_k", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env=dict(os.environ, JAX_PLATFORMS="cpu"),
    )
    assert out.returncode == 0, out.stderr
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert line["label"] == "business" and list(line["probabilities"]) == ["business"]


@pytest.mark.slow
def test_kill_then_resume_matches_an_uninterrupted_run(tmp_path, cache_dir, reference_run):
    reference, _ = reference_run
    workdir = tmp_path / "killed"
    process = train_py(workdir, cache_dir, "--config.train.checkpoint_every_steps=10", wait=False)
    deadline = time.time() + 240
    while not os.path.isdir(workdir / "checkpoints" / "10") and time.time() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.communicate()  # waits, and closes its output pipe
    saved = Checkpoints(str(workdir)).latest_step()
    assert saved is not None
    # Killed after logging past its last checkpoint, in the middle of a line.
    with open(workdir / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"step": saved + 5, "split": "train", "loss": 9.0}) + '\n{"step": 99, "spl')
    result = train_py(workdir, cache_dir, "--config.train.checkpoint_every_steps=10")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Resuming from step {saved}" in result.stdout and "lines of metrics.jsonl written after it" in result.stdout
    # Each step and split is logged once, as by the uninterrupted run.
    assert logged(workdir) == logged(reference)
    resumed, expected = train_losses(workdir), train_losses(reference)
    assert max(resumed) == max(expected)
    for step, loss in resumed.items():
        if step in expected and step > 10:
            assert loss == pytest.approx(expected[step], abs=1e-6), step


@pytest.mark.slow
def test_a_finished_workdir_is_left_as_it_is(tmp_path, cache_dir, reference_run):
    reference, _ = reference_run
    workdir = tmp_path / "finished"
    shutil.copytree(reference, workdir)
    before, metrics = files(workdir), (workdir / "metrics.jsonl").read_bytes()
    # The same command, with JAX left to find its backends as a user's run does.
    result = train_py(workdir, cache_dir, "--config.train.checkpoint_every_steps=10", platforms=None)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("already finished at step 60")
    assert f"  metrics      {workdir / 'metrics.jsonl'}" in result.stdout and "final test: loss" in result.stdout
    assert "Unable to initialize backend" not in result.stdout + result.stderr
    assert files(workdir) == before and (workdir / "metrics.jsonl").read_bytes() == metrics


@pytest.mark.slow
def test_reevaluate_replaces_the_final_lines(tmp_path, cache_dir, reference_run, capsys):
    reference, _ = reference_run
    workdir = tmp_path / "again"
    shutil.copytree(reference, workdir)
    old = read_metrics(workdir)
    final = loop.train_and_evaluate(smoke_config(cache_dir, train__checkpoint_every_steps=10), str(workdir),
                                    reevaluate=True)
    assert "evaluating the model of step 60 again" in capsys.readouterr().out
    new = read_metrics(workdir)
    assert logged(workdir) == logged(reference)  # one set of final lines, not two
    assert [m for m in new if not m.get("final")] == [m for m in old if not m.get("final")]
    for split in ("validation", "test"):
        [line] = [m for m in new if m.get("final") and m["split"] == split]
        assert final[split]["accuracy"] == pytest.approx(line["accuracy"])


@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_and_exits_nonzero(tmp_path, cache_dir):
    workdir = tmp_path / "stopped"
    process = train_py(workdir, cache_dir, "--config.train.checkpoint_every_steps=1000",
                       "--config.train.num_steps=100000", wait=False)
    deadline = time.time() + 240
    # Wait until training is under way (the first progress line), then ask it to stop.
    for line in process.stdout:
        if line.startswith("step ") or time.time() > deadline:
            break
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, output
    step = Checkpoints(str(workdir)).latest_step()
    assert step is not None and step >= 10
    assert f"at step {step}" in output
    # The stopped part's wall time is printed as the end summary prints it, for studies to add up.
    assert re.search(rf"at step {step}; checkpoint saved in .*; wall time \d+:\d\d:\d\d", output), output


@pytest.mark.slow
def test_same_seed_gives_identical_losses(tmp_path, cache_dir):
    first = loop.train_and_evaluate(smoke_config(cache_dir, train__num_steps=20), str(tmp_path / "a"))
    second = loop.train_and_evaluate(smoke_config(cache_dir, train__num_steps=20), str(tmp_path / "b"))
    assert train_losses(tmp_path / "a") == train_losses(tmp_path / "b")
    assert first == second


@pytest.mark.slow
def test_the_test_devices_match_one_device(reference_run, checkpointed_smoke_workdir):
    assert jax.device_count() == TEST_DEVICES > 1
    reference, _ = reference_run
    # The same config, trained in-process on the test devices.
    sharded, single = train_losses(checkpointed_smoke_workdir), train_losses(reference)
    assert sharded.keys() == single.keys()
    np.testing.assert_allclose([sharded[s] for s in sorted(sharded)], [single[s] for s in sorted(single)], atol=1e-5)


@pytest.mark.slow
def test_incompatible_config_is_refused(tmp_path, cache_dir):
    workdir = str(tmp_path / "w")
    loop.train_and_evaluate(smoke_config(cache_dir, train__num_steps=2), workdir)
    with pytest.raises(loop.IncompatibleWorkdir, match=r"model\.embed_dim: 16 -> 8"):
        loop.train_and_evaluate(smoke_config(cache_dir, train__num_steps=4, model__embed_dim=8), workdir)
    # Changing only the length of training resumes, even a finished run: it trains on, and its
    # old final lines give way to the new ones.
    loop.train_and_evaluate(smoke_config(cache_dir, train__num_steps=4), workdir)
    assert max(train_losses(workdir)) == 4
    finals = [(step, split) for step, split, final in logged(workdir) if final]
    assert finals == [(4, "validation"), (4, "test")]
    assert len(set(logged(workdir))) == len(logged(workdir))


@pytest.mark.slow
def test_no_final_metrics_without_a_training_step(tmp_path, cache_dir):
    with pytest.raises(UserError):
        loop.train_and_evaluate(smoke_config(cache_dir, train__num_epochs=0), str(tmp_path))
    assert not (tmp_path / "metrics.jsonl").exists()


@pytest.mark.slow
def test_a_bad_class_weight_setting_fails_before_the_data_loads(tmp_path, cache_dir):
    workdir = tmp_path / "w"
    with pytest.raises(ValueError, match=r"train\.class_weights .* not 'balanced:-1'"):
        loop.train_and_evaluate(smoke_config(cache_dir, train__class_weights="balanced:-1"), str(workdir))
    assert not (workdir / "checkpoints").exists()


def test_a_run_that_stops_before_writing_leaves_no_new_workdir(tmp_path, cache_dir):
    workdir, nowhere = tmp_path / "new", tmp_path / "nowhere"
    config = smoke_config(cache_dir, data__source="auto", data__dir=str(nowhere))
    with pytest.raises(DataError, match=r"nowhere: no such data directory \(--config\.data\.dir\)$"):
        loop.train_and_evaluate(config, str(workdir))
    assert not workdir.exists()
    # A workdir that was there before stays, with the lock the run took.
    workdir.mkdir()
    with pytest.raises(DataError):
        loop.train_and_evaluate(config, str(workdir))
    assert os.listdir(workdir) == [".lock"]


@pytest.mark.slow
def test_a_second_run_on_a_busy_workdir_stops_before_touching_it(tmp_path, cache_dir):
    import fcntl

    workdir = tmp_path / "busy"
    workdir.mkdir()
    with open(workdir / ".lock", "w") as lock:  # a run in progress holds the lock
        lock.write("pid 12345 on host\n")
        lock.flush()
        fcntl.flock(lock, fcntl.LOCK_EX)
        with pytest.raises(FolderInUse, match="pid 12345 on host"):
            loop.train_and_evaluate(smoke_config(cache_dir, train__num_steps=2), str(workdir))
    assert sorted(os.listdir(workdir)) == [".lock"]
    # Once it is released, the workdir trains (and the lock names the new holder while it runs).
    loop.train_and_evaluate(smoke_config(cache_dir, train__num_steps=2), str(workdir))
    assert max(train_losses(workdir)) == 2


@pytest.mark.slow
def test_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path, cache_dir):
    workdir = str(tmp_path / "nan")
    config = smoke_config(
        cache_dir, train__num_steps=40, train__checkpoint_every_steps=1, train__log_every_steps=1,
        train__optimizer="sgd", train__grad_clip_norm=0.0, train__learning_rate=1e30,
    )
    with pytest.raises(loop.NonFiniteLoss, match=r"at step \d+.*last good checkpoint is step \d+"):
        loop.train_and_evaluate(config, workdir)
    checkpoints = Checkpoints(workdir)
    step = checkpoints.latest_step()
    assert step is not None
    leaves = jax.tree.leaves(checkpoints.read_state(step)["params"])
    assert all(np.isfinite(np.asarray(x)).all() for x in leaves)


def test_model_selection_keeps_the_best_validation_parameters():
    import ml_collections

    class FakeCheckpoints:
        def __init__(self):
            self.saved = []

        def save_best(self, step, params, metric, value):
            self.saved.append((step, params, value))

    train_config = ml_collections.ConfigDict({"select_best": True, "select_metric": "accuracy"})
    checkpoints, best = FakeCheckpoints(), None
    for step, accuracy in [(10, 0.5), (20, 0.8), (30, 0.7), (40, 0.8)]:
        best = keep_if_best(checkpoints, best, step, "p", {"accuracy": accuracy}, train_config)
    assert best == {"step": 20, "metric": "accuracy", "value": 0.8}  # ties keep the earlier step
    assert [s for s, _, _ in checkpoints.saved] == [10, 20]
    train_config.select_best = False
    assert keep_if_best(checkpoints, None, 50, "p", {"accuracy": 1.0}, train_config) is None


def test_an_epoch_compiles_at_most_one_train_step_per_bucket(cache_dir, counting_traces):
    from jcaps.data.datasets import load_dataset
    from jcaps.train import mesh as mesh_lib
    from jcaps.train.families import get_family
    from jcaps.train.state import create_train_state, dummy_inputs, model_for
    from jcaps.train.steps import compile_steps

    # Batch maxima of the generated texts lie between 42 and 48 tokens.
    config = smoke_config(cache_dir, data__bucket_boundaries=(44, 46, 48, 64), data__max_len=64)
    dataset = load_dataset(config.data, config.train.seed)
    mesh = mesh_lib.data_mesh()
    batch_size = config.train.batch_size
    state = create_train_state(config, model_for(config, dataset), dummy_inputs(config, dataset), 100, mesh)
    family, traced = counting_traces(get_family(config.model.name))
    train_fn, _ = compile_steps(config, family, dataset.num_classes, mesh)
    iterator = dataset.train_iterator(batch_size, config.train.seed)
    shapes = set()
    for _ in range(dataset.steps_per_epoch(batch_size)):
        batch = next(iterator)
        shapes.add(batch["tokens"].shape)
        state, _ = train_fn(state, mesh_lib.global_batch(batch, mesh))
    assert len(shapes) >= 2  # the generated texts span several buckets
    assert sorted(traced) == sorted(shapes) and len(shapes) <= len(config.data.bucket_boundaries)


@pytest.mark.slow
def test_bfloat16_activations_train(tmp_path, cache_dir):
    loop.train_and_evaluate(smoke_config(cache_dir, train__dtype="bfloat16", train__num_steps=40), str(tmp_path))
    losses = train_losses(tmp_path)
    assert all(np.isfinite(list(losses.values())))
    assert losses[max(losses)] < 0.8 * losses[min(losses)]


@pytest.mark.slow
def test_profile_steps_write_a_trace(tmp_path, cache_dir):
    loop.train_and_evaluate(smoke_config(cache_dir, train__num_steps=4, train__profile_steps=2), str(tmp_path))
    traces = [name for _, _, files in os.walk(tmp_path / "profile") for name in files if name.endswith(".xplane.pb")]
    assert traces
