"""Fault injection: a damaged, half-written or unwritable checkpoint never costs a run.

After each fault, running the command again either finishes with the final metrics of an
uninterrupted run or stops with one `error:` line; nothing is loaded silently wrong. Runs use
the `:smoke` fastText config on generated data, checkpointed every 10 of its 60 steps.
"""

from __future__ import annotations

import errno
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import types
from pathlib import Path

import orbax.checkpoint as ocp
import pytest

from jcaps.data import datasets
from jcaps.errors import UserError, WriteFailed
from jcaps.train import checkpoints as checkpoints_lib
from jcaps.train import final_params, loop
from jcaps.train.checkpoints import CHECKSUMS_FILE, Checkpoints, DamagedCheckpoint, SaveFailed
from jcaps.train.config import load
from tests.command_env import command_env
from tests.workdir_flags import own_data_cache

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMOKE = os.path.join(ROOT, "configs", "fasttext_ag_news.py") + ":smoke"
EVERY = 10


class _Crash(Exception):
    """Stands for the process dying at the point where it is raised."""


def smoke_config(cache_dir):
    config = load(SMOKE)
    config.data.cache_dir = str(cache_dir)
    config.train.progress = "none"
    config.train.checkpoint_every_steps = EVERY
    return config


def final_metrics(workdir) -> dict:
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        return {r["split"]: r for r in map(json.loads, f) if r.get("final")}


def step_files(workdir, *steps: str) -> list[str]:
    """Every file of the given step directories (e.g. "checkpoints/40", "best/30"), sorted."""
    found = []
    for step in steps:
        for root, _, names in os.walk(os.path.join(workdir, step)):
            found += [os.path.join(root, name) for name in names]
    return sorted(found)


def flip_byte(path: str, position: int | None = None) -> None:
    data = bytearray(Path(path).read_bytes())
    position = len(data) // 2 if position is None else position
    data[position] ^= 0xFF
    with open(path, "wb") as f:
        f.write(data)


@pytest.fixture(scope="session")
def reference(checkpointed_smoke_workdir):
    """(workdir, final metrics) of an uninterrupted run (`smoke_config`'s)."""
    return checkpointed_smoke_workdir, final_metrics(checkpointed_smoke_workdir)


def checkpoints_only_copy(reference, workdir):
    """A copy of the reference workdir that loads from its checkpoints, as one trained before
    final_params.msgpack existed (or resumed since) does: the faults below are theirs."""
    shutil.copytree(reference[0], workdir)
    (workdir / final_params.FINAL_PARAMS_FILE).unlink()
    return workdir


@pytest.fixture(scope="session")
def crashed(built_once, cache_dir):
    """A workdir whose run died right after saving step 40 (checkpoints 20, 30, 40; best 30, its one
    evaluation), once a session (`built_once`)."""
    save = Checkpoints.save

    def save_then_crash(self, step, *args):
        save(self, step, *args)
        if step == 40:
            raise _Crash

    def crash(folder):
        workdir = folder / "workdir"
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(Checkpoints, "save", save_then_crash)
            with pytest.raises(_Crash):
                loop.train_and_evaluate(smoke_config(cache_dir), str(workdir))
        assert sorted(os.listdir(workdir / "checkpoints")) == ["20", "30", "40", "labels.json", "vocab.json"]

    return built_once("checkpoint_faults-crashed", crash)[0] / "workdir"


def assert_same_finals(workdir, expected: dict) -> None:
    finals = final_metrics(workdir)
    for split in ("validation", "test"):
        for key in ("loss", "accuracy", "macro_f1"):
            assert finals[split][key] == pytest.approx(expected[split][key], abs=1e-6), (split, key)


def resume(tmp_path, crashed, cache_dir, capsys, damage=None) -> tuple:
    """Copies the crashed workdir, applies `damage(workdir)`, trains it again; returns (workdir,
    stderr of the run)."""
    workdir = tmp_path / "run"
    shutil.copytree(crashed, workdir)
    if damage is not None:
        damage(workdir)
    capsys.readouterr()
    loop.train_and_evaluate(smoke_config(cache_dir), str(workdir))
    return workdir, capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# Checksums of a step directory.
# ---------------------------------------------------------------------------------------------


def test_checksums_catch_every_change_but_the_commit_markers(tmp_path):
    step = tmp_path / "40"
    (step / "state" / "d").mkdir(parents=True)
    (step / "state" / "d" / "data").write_bytes(bytes(range(256)) * 4)
    (step / "state" / "commit_success.txt").write_text("ok")
    (step / "_CHECKPOINT_METADATA").write_text('{"a": 1}')
    assert checkpoints_lib.verify_checksums(str(step)) is False  # nothing to check against
    checkpoints_lib.write_checksums(str(step))
    saved = json.loads((step / CHECKSUMS_FILE).read_text())
    assert sorted(saved["files"]) == ["_CHECKPOINT_METADATA", "state/d/data"]
    assert saved["files"]["state/d/data"][0] == 1024
    assert checkpoints_lib.verify_checksums(str(step)) is True
    (step / "state" / "commit_success.txt").unlink()  # holds no data: not a damage
    assert checkpoints_lib.verify_checksums(str(step)) is True

    data = step / "state" / "d" / "data"
    flip_byte(str(data), 700)
    with pytest.raises(DamagedCheckpoint, match="contents differ from the save") as raised:
        checkpoints_lib.verify_checksums(str(step))
    assert raised.value.path == str(data)
    flip_byte(str(data), 700)
    with open(data, "r+b") as f:
        f.truncate(1000)
    with pytest.raises(DamagedCheckpoint, match="1000 bytes where the save wrote 1024"):
        checkpoints_lib.verify_checksums(str(step))
    data.unlink()
    with pytest.raises(DamagedCheckpoint, match="missing"):
        checkpoints_lib.verify_checksums(str(step))
    (step / CHECKSUMS_FILE).write_text('{"algorithm": "sha256", "fil')
    with pytest.raises(DamagedCheckpoint, match="unreadable checksums"):
        checkpoints_lib.verify_checksums(str(step))


@pytest.mark.slow
def test_every_saved_step_has_checksums(reference):
    workdir, _ = reference
    for step in ("checkpoints/40", "checkpoints/50", "checkpoints/60", "best/60"):
        assert os.path.isfile(workdir / step / CHECKSUMS_FILE), step
        assert checkpoints_lib.verify_checksums(str(workdir / step))


# ---------------------------------------------------------------------------------------------
# Resuming after damage.
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_crash_after_a_save_resumes_to_the_same_metrics(tmp_path, crashed, cache_dir, reference, capsys):
    workdir, err = resume(tmp_path, crashed, cache_dir, capsys)
    assert err == ""
    assert_same_finals(workdir, reference[1])


@pytest.mark.slow
def test_damaged_latest_checkpoint_is_moved_aside_and_the_previous_one_resumes(
        tmp_path, crashed, cache_dir, reference, capsys):
    def overwrite_100_bytes(workdir):
        target = step_files(workdir, "checkpoints/40/state")[-1]
        with open(target, "r+b") as f:
            f.write(b"\0" * 100)

    workdir, err = resume(tmp_path, crashed, cache_dir, capsys, overwrite_100_bytes)
    [line] = err.splitlines()
    assert line.startswith("warning: checkpoint step 40 is damaged (") and "checkpoints/40/state/" in line
    assert line.endswith(f"moved it to {workdir / 'checkpoints' / '40.damaged'}; resume from step 30")
    assert (workdir / "checkpoints" / "40.damaged").is_dir()
    assert_same_finals(workdir, reference[1])
    # The metrics of steps 31..40 were written again, once.
    steps = [(r["step"], r["split"]) for r in map(json.loads, (workdir / "metrics.jsonl").read_text().splitlines()) if not r.get("final")]
    assert len(steps) == len(set(steps))


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_any_flipped_byte_is_caught_and_the_run_finishes(tmp_path, crashed, cache_dir, reference, capsys, seed):
    """One byte of a random file of the last checkpoint or of the best parameters: the run
    finishes with the uninterrupted run's metrics, having said which step or parameters it
    moved aside."""
    rng = random.Random(seed)
    chosen = {}

    def flip_random_byte(workdir):
        target = rng.choice(step_files(workdir, "checkpoints/40", "best/30"))
        chosen["file"] = target
        flip_byte(target, rng.randrange(os.path.getsize(target)))

    workdir, err = resume(tmp_path, crashed, cache_dir, capsys, flip_random_byte)
    if os.path.basename(chosen["file"]) == "commit_success.txt":
        assert err == ""
    else:
        [line] = err.splitlines()
        assert line.startswith("warning:") and "damaged" in line, line
    assert_same_finals(workdir, reference[1])


@pytest.mark.slow
def test_truncated_file_and_removed_commit_marker(tmp_path, crashed, cache_dir, reference, capsys):
    def truncate_and_unmark(workdir):
        for path in step_files(workdir, "checkpoints/40/state"):
            if "/d/" in path:
                open(path, "w").close()
        for path in step_files(workdir, "checkpoints/30"):
            if os.path.basename(path) == "commit_success.txt":
                os.remove(path)

    workdir, err = resume(tmp_path, crashed, cache_dir, capsys, truncate_and_unmark)
    [line] = err.splitlines()
    assert "checkpoint step 40 is damaged" in line and "bytes where the save wrote" in line
    assert_same_finals(workdir, reference[1])


@pytest.mark.slow
def test_a_checkpoint_without_checksums_is_restored_as_orbax_committed_it(
        tmp_path, crashed, cache_dir, reference, capsys):
    """Killed between orbax's commit and the checksum write (or saved by an earlier jcaps)."""
    workdir, err = resume(tmp_path, crashed, cache_dir, capsys,
                          lambda w: os.remove(w / "checkpoints" / "40" / CHECKSUMS_FILE))
    assert err == ""
    assert_same_finals(workdir, reference[1])


@pytest.mark.slow
def test_no_intact_checkpoint_is_one_error_and_moves_nothing(tmp_path, crashed, cache_dir):
    workdir = tmp_path / "run"
    shutil.copytree(crashed, workdir)
    for step in ("20", "30", "40"):
        flip_byte(step_files(workdir, f"checkpoints/{step}/state")[-1])
    with pytest.raises(DamagedCheckpoint, match=r"no checkpoint is intact \(step 40: .*; step 30: .*; step 20: ") as raised:
        loop.train_and_evaluate(smoke_config(cache_dir), str(workdir))
    assert "to train from the start" in raised.value.hint
    assert sorted(n for n in os.listdir(workdir / "checkpoints") if n[0].isdigit()) == ["20", "30", "40"]


@pytest.mark.slow
def test_damaged_best_parameters_restart_model_selection(tmp_path, crashed, cache_dir, reference, capsys):
    workdir, err = resume(tmp_path, crashed, cache_dir, capsys,
                          lambda w: flip_byte(step_files(w, "best/30/params")[-1]))
    [line] = err.splitlines()
    assert line.startswith("warning: the best parameters are damaged (") and "model selection starts again" in line
    assert (workdir / "best" / "30.damaged").is_dir()
    assert_same_finals(workdir, reference[1])  # the smoke run's best is its last step


# ---------------------------------------------------------------------------------------------
# A save that fails.
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("failure", [
    OSError(errno.ENOSPC, "No space left on device"),
    # tensorstore's report of the same failed write
    ValueError("RESOURCE_EXHAUSTED: Error writing local file \"x\": Failed to write 3637 bytes to file 17: No space "
               "left on device [os_error_code='28']"),
])
def test_a_full_disk_stops_the_run_with_one_line_and_the_next_run_resumes(
        tmp_path, crashed, cache_dir, reference, failure):
    workdir = tmp_path / "run"
    shutil.copytree(crashed, workdir)
    save = ocp.CheckpointManager.save

    def full_disk(self, step, *args, **kwargs):
        if step == 50:
            raise failure
        return save(self, step, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ocp.CheckpointManager, "save", full_disk)
        with pytest.raises(SaveFailed) as raised:
            loop.train_and_evaluate(smoke_config(cache_dir), str(workdir))
    message = str(raised.value)
    assert re.match(r"cannot save the (checkpoint|best parameters) of step 50 in ", message), message
    assert "no space left on the device" in message and "free there)" in message and "\n" not in message
    assert "run the same command again" in raised.value.hint
    assert checkpoints_lib.verify_checksums(str(workdir / "checkpoints" / "40"))
    loop.train_and_evaluate(smoke_config(cache_dir), str(workdir))
    assert_same_finals(workdir, reference[1])


def full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def full_disk_in_array_record(*args, **kwargs):
    raise RuntimeError('Failed to finalize writing of split "train": write() failed: No space left on device')


# (what fails, how, the start of the one-line message): every write of a training but the saves.
FULL_DISK_WRITES = [
    ("os.pwrite", full_disk, "cannot write the lock of the workdir "),
    ("jcaps.data.preparation.prepare_text_splits", full_disk_in_array_record, "cannot write the prepared data in "),
    ("jcaps.data.text.TextDataset.save_metadata", full_disk, "cannot write the vocabulary and labels of the data in "),
    ("jcaps.train.config.to_json", full_disk, "cannot write the config "),
    ("jcaps.train.metrics.open", full_disk, "cannot write the metrics "),
    ("tensorboardX.SummaryWriter.add_scalar", full_disk, "cannot write the TensorBoard events in "),
]


@pytest.mark.slow
@pytest.mark.parametrize("target,failure,message", FULL_DISK_WRITES,
                         ids=[message.split(" ")[3] for _, _, message in FULL_DISK_WRITES])
def test_a_full_disk_at_any_write_is_one_line_and_the_run_resumes(tmp_path, cache_dir, reference, target, failure,
                                                                   message):
    workdir = tmp_path / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(target, failure, raising=False)  # metrics.open: the builtin, for that module alone
        with pytest.raises(WriteFailed) as raised:
            loop.train_and_evaluate(smoke_config(cache_dir), str(workdir))
    assert str(raised.value).startswith(message) and str(raised.value).endswith("free there)"), raised.value
    assert "no space left on the device" in str(raised.value) and "\n" not in str(raised.value)
    assert "run the same command again" in raised.value.hint
    loop.train_and_evaluate(smoke_config(cache_dir), str(workdir))
    assert_same_finals(workdir, reference[1])


@pytest.mark.slow
def test_a_bug_in_a_save_is_not_taken_for_a_full_disk(tmp_path, crashed, cache_dir):
    workdir = tmp_path / "run"
    shutil.copytree(crashed, workdir)

    def broken(self, step, *args, **kwargs):
        raise ValueError("a tree structure mismatch")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ocp.CheckpointManager, "save", broken)
        with pytest.raises(ValueError, match="tree structure mismatch") as raised:
            loop.train_and_evaluate(smoke_config(cache_dir), str(workdir))
    assert not isinstance(raised.value, UserError)


# ---------------------------------------------------------------------------------------------
# Ctrl-C at each phase of a run.
# ---------------------------------------------------------------------------------------------


def interrupted(function):
    """`function`, with a SIGINT arriving as it starts."""

    def with_sigint(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        return function(*args, **kwargs)

    return with_sigint


# (what the SIGINT interrupts, how the one line goes on): outside the steps the run stops at once,
# during a step's save at the step boundary after it.
OUTSIDE_THE_STEPS = "outside the training steps; the checkpoints saved are intact"
SIGINT_PHASES = [
    (datasets, "load_dataset", OUTSIDE_THE_STEPS),
    (loop, "_compile", OUTSIDE_THE_STEPS),
    (Checkpoints, "save", "at step 50; checkpoint saved in "),
    (Checkpoints, "save_best", "at step 60; checkpoint saved in "),  # the last step: no final evaluation
    (loop, "_evaluate_final", OUTSIDE_THE_STEPS),
]


@pytest.mark.slow
@pytest.mark.parametrize("owner,name,where", SIGINT_PHASES, ids=[name for _, name, _ in SIGINT_PHASES])
def test_ctrl_c_at_any_phase_stops_with_status_130_and_the_run_resumes(tmp_path, crashed, cache_dir, reference,
                                                                        owner, name, where):
    workdir = tmp_path / "run"
    shutil.copytree(crashed, workdir)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(owner, name, interrupted(getattr(owner, name)))
        with pytest.raises(loop.TrainingInterrupted) as raised:
            loop.train_and_evaluate(smoke_config(cache_dir), str(workdir))
    assert raised.value.exit_code == 130 and str(raised.value).startswith(f"interrupted by SIGINT {where}")
    loop.train_and_evaluate(smoke_config(cache_dir), str(workdir))
    assert_same_finals(workdir, reference[1])


# ---------------------------------------------------------------------------------------------
# Killed at any point of a save (a real SIGKILL, in a subprocess).
# ---------------------------------------------------------------------------------------------

# Runs train.py with a kill at one point of one save: `orbax` as soon as orbax's save returns
# (its thread writing the step, or done with it), `commit` after orbax's commit and before the checksums,
# `checksums` with the checksums written to their temporary file but not renamed, `time` at a
# random moment of the run.
KILLER = r"""
import os, random, runpy, signal, sys, threading
import orbax.checkpoint as ocp
from jcaps.train import checkpoints
point, step, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def die():
    os.kill(os.getpid(), signal.SIGKILL)
if point == "orbax":
    save = ocp.CheckpointManager.save
    def save_then_die(self, at, *args, **kwargs):
        save(self, at, *args, **kwargs)
        if at == step:  # orbax's thread still writing, or done and not yet summed
            die()
    ocp.CheckpointManager.save = save_then_die
elif point in ("commit", "checksums"):
    write = checkpoints.write_checksums
    def write_or_die(directory, binding=None):
        if directory.endswith(os.sep + str(step)):
            if point == "commit":
                die()
            os.replace = lambda *a: die()
        return write(directory, binding)
    checkpoints.write_checksums = write_or_die
else:
    threading.Timer(random.Random(seed).uniform(2.0, 6.0), die).start()
sys.argv = sys.argv[4:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.slow
@pytest.mark.parametrize("point,step,seed", [("orbax", 40, 0), ("commit", 30, 0), ("checksums", 50, 0),
                                             ("time", 0, 1), ("time", 0, 2)])
def test_sigkill_during_a_save_then_rerun_matches_an_uninterrupted_run(tmp_path, cache_dir, reference, point, step,
                                                                       seed):
    workdir = tmp_path / "killed"
    flags = ["--config", SMOKE, "--workdir", str(workdir), f"--config.data.cache_dir={cache_dir}",
             f"--config.train.checkpoint_every_steps={EVERY}", "--config.train.progress=none"]
    env = command_env()
    killed = subprocess.run([sys.executable, "-c", KILLER, point, str(step), str(seed),
                             os.path.join(ROOT, "train.py"), *flags],
                            env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    if point != "time":
        assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    again = subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), *flags], env=env, cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Traceback" not in again.stderr
    assert_same_finals(workdir, reference[1])


# ---------------------------------------------------------------------------------------------
# Parameters that are not finite.
# ---------------------------------------------------------------------------------------------


def strict_records(path) -> list[dict]:
    """The JSON lines of `path`, parsed by a reader that refuses `NaN` and `Infinity`."""

    def refuse(token):
        raise AssertionError(f"{path}: {token} is not JSON")

    return [json.loads(line, parse_constant=refuse) for line in Path(path).read_text(encoding="utf-8").splitlines()]


@pytest.mark.slow
def test_a_nan_at_an_evaluation_step_stops_the_run_before_it_is_selected(tmp_path, cache_dir):
    """The learning rate blows up after step 36 (×1e36 from 60 % of training); validation, each
    step, sees the NaN before any log line does. NaN scores all take one class, whose accuracy
    could beat the real model's: the step must stop the run, never become the best."""
    config = smoke_config(cache_dir)
    config.train.update(schedule="steps", decay_boundaries=(0.6,), decay_factor=1e36, eval_every_steps=1,
                        log_every_steps=100)
    workdir = tmp_path / "nan"
    with pytest.raises(loop.NonFiniteLoss, match=r"validation loss nan at step (\d+); stopping before model "
                                                 r"selection \(the last good checkpoint is step 30 in ") as raised:
        loop.train_and_evaluate(config, str(workdir))
    stopped_at = int(re.search(r"at step (\d+)", str(raised.value)).group(1))
    [best] = [int(name) for name in os.listdir(workdir / "best")]
    assert best < stopped_at
    records = strict_records(workdir / "metrics.jsonl")
    assert [r["loss"] for r in records if r["step"] == stopped_at] == [None]  # null, not NaN
    from jcaps.evaluate import evaluate

    assert evaluate(str(workdir), "test")["selected_step"] == best


@pytest.mark.slow
def test_parameters_that_are_not_finite_are_refused_naming_the_newest_finite_checkpoint(tmp_path, reference, capsys):
    """A workdir whose best/ (or newest checkpoint) holds NaN weights, as training saved them before
    it checked."""
    import jax
    import numpy as np

    from jcaps.evaluate import evaluate

    workdir = checkpoints_only_copy(reference, tmp_path / "trained")
    checkpoints = Checkpoints(str(workdir))
    nan_params = jax.tree.map(lambda x: np.full_like(x, np.nan), checkpoints.read_state(60)["params"])
    shutil.rmtree(workdir / "best" / "60")
    checkpoints.save_best(55, nan_params, "accuracy", 1.0)
    checkpoints.close()
    with pytest.raises(DamagedCheckpoint) as raised:
        evaluate(str(workdir), "test")
    assert str(raised.value) == (f"{workdir / 'best' / '55'}: its parameters are not finite (NaN or infinity); "
                                 "the newest checkpoint with finite parameters is step 60")
    assert raised.value.hint.startswith("--parameters last")
    assert evaluate(str(workdir), "test", parameters="last")["selected_step"] == 60

    checkpoints = Checkpoints(str(workdir))
    checkpoints.save(70, types.SimpleNamespace(**{**checkpoints.read_state(60), "params": nan_params}), None)
    checkpoints.close()
    capsys.readouterr()
    assert evaluate(str(workdir), "test", parameters="last")["selected_step"] == 60
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("warning: checkpoint step 70 is damaged") and "not finite" in line
    assert line.endswith("use step 60")


# ---------------------------------------------------------------------------------------------
# Loading a trained workdir for inference.
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_damaged_best_parameters_are_refused_unless_the_last_checkpoint_is_asked_for(tmp_path, reference, capsys):
    from jcaps.evaluate import evaluate

    workdir = checkpoints_only_copy(reference, tmp_path / "trained")
    largest = max(step_files(workdir, "best/60"), key=os.path.getsize)
    flip_byte(largest)  # same size, other contents
    with pytest.raises(DamagedCheckpoint) as raised:
        evaluate(str(workdir), "test")
    assert raised.value.path == largest and "contents differ from the save" in str(raised.value)
    assert "--parameters last" in raised.value.hint
    metrics = evaluate(str(workdir), "test", parameters="last")
    assert (metrics["parameters"], metrics["selected_step"]) == ("last", 60)
    assert metrics["accuracy"] == pytest.approx(reference[1]["test"]["accuracy"], abs=1e-6)

    flip_byte(step_files(workdir, "checkpoints/60/state")[-1])
    capsys.readouterr()
    metrics = evaluate(str(workdir), "test", parameters="last")
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("warning: checkpoint step 60 is damaged") and line.endswith("use step 50")
    assert metrics["selected_step"] == 50
    assert (workdir / "checkpoints" / "60").is_dir()  # a command that reads moves nothing


@pytest.mark.slow
def test_damaged_best_parameters_are_not_read_beside_their_intact_final_copy(tmp_path, reference):
    """final_params.msgpack, checked against its own checksum, holds the same parameters."""
    from jcaps.evaluate import evaluate

    workdir = tmp_path / "trained"
    shutil.copytree(reference[0], workdir)
    flip_byte(max(step_files(workdir, "best/60"), key=os.path.getsize))
    metrics = evaluate(str(workdir), "test")
    assert (metrics["parameters"], metrics["selected_step"]) == ("best", 60)
    assert metrics["accuracy"] == pytest.approx(reference[1]["test"]["accuracy"], abs=1e-6)


@pytest.mark.slow
def test_evaluate_on_truncated_best_parameters_is_one_error_line(tmp_path, reference):
    workdir = checkpoints_only_copy(reference, tmp_path / "trained")
    for path in step_files(workdir, "best/60/params"):
        if f"{os.sep}d{os.sep}" in path:
            open(path, "w").close()
    result = subprocess.run([sys.executable, "-m", "jcaps.evaluate", "--workdir", str(workdir),
                             own_data_cache(workdir)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, env=dict(os.environ, JAX_PLATFORMS="cpu"))
    assert result.returncode == 2 and result.stdout == ""
    error, hint = result.stderr.splitlines()
    assert error.startswith(f"error: {workdir / 'best' / '60' / 'params'}") and "bytes where the save wrote" in error
    assert hint.startswith("hint: --parameters last")


@pytest.mark.slow
def test_best_parameters_replaced_while_they_are_read_are_read_again(tmp_path, reference, capsys):
    """A training saves a new best step, deleting the old one, between the reader's look at
    best/ and its read of the parameters: the reader reads the new step, and says so."""
    from jcaps.train.workdir import load_trained

    workdir = checkpoints_only_copy(reference, tmp_path / "trained")
    restore, moved_on = Checkpoints.restore_best_params, []

    def training_moves_on(self, params, step=None):
        if not moved_on:
            writer = Checkpoints(str(workdir))
            writer.save_best(61, writer.read_state(60)["params"], "accuracy", 1.0)  # deletes best/60
            writer.close()
            moved_on.append(step)
        return restore(self, params, step)

    capsys.readouterr()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Checkpoints, "restore_best_params", training_moves_on)
        trained = load_trained(str(workdir))
    assert moved_on == [60] and (trained.parameters, trained.selected_step) == ("best", 61)
    [line] = capsys.readouterr().err.splitlines()
    assert line == f"warning: {workdir} changed while it was read (a training is writing it); reading it again"


@pytest.mark.slow
def test_readers_beside_a_training_never_fail(tmp_path):
    """The reader benchmark at its tiny size: loads and predict calls while train.py saves a best
    step at every step and deletes old checkpoints."""
    result = subprocess.run([sys.executable, "-m", "benchmarks.readers_beside_training", "--out", str(tmp_path), "--tiny"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    assert (results["load_failures"], results["predict_failures"]) == (0, 0), results["failures"]
    assert results["loads"] == 30 and results["steps_during_reads"] > 0


@pytest.mark.slow
def test_the_integrity_benchmark_runs_at_a_tiny_size(tmp_path):
    result = subprocess.run([sys.executable, "-m", "benchmarks.checkpoint_integrity", "--out", str(tmp_path), "--tiny"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env=command_env())
    assert result.returncode == 0, result.stdout + result.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    for key in ("async_return_s", "orbax_save_s", "jcaps_save_s", "orbax_restore_s", "jcaps_restore_s"):
        assert results[key] > 0, key
    assert results["state_mb"] > 0 and results["parameters"] > 0 and results["sizes"] == "tiny"
    assert (results["vocab_size"], results["repeats"]) == (200, 1)
    assert results["_run"]["tiny"] is True and results["_run"]["commit"]  # the run's provenance
    assert results["save_overhead"] == pytest.approx(results["jcaps_save_s"] / results["orbax_save_s"])
    assert [name for name in os.listdir(tmp_path)] == ["results.json"]  # the scratch folder is removed
