"""A workdir's files bound to its parameters (`jcaps.train.binding`, `jcaps.train.final_params`):
the one-file parameters of another workdir are passed over, a changed vocabulary, labels file or
config is one line naming it, and a workdir saved before bindings loads as before."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from jcaps.train import loop
from jcaps.train.binding import BINDING_KEY, MismatchedWorkdir
from jcaps.train.final_params import FINAL_PARAMS_FILE
from jcaps.train.workdir import load_trained
from tests.command_env import command_env

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = "fasttext_ag_news.py"


@pytest.fixture
def workdir(tmp_path, trained_smoke_workdir):
    """A copy of the session's fastText `:smoke` workdir, this test's to change."""
    trained, _ = trained_smoke_workdir(CONFIG)
    return shutil.copytree(trained, tmp_path / "workdir")


def newest_step(workdir) -> str:
    steps = [int(name) for name in os.listdir(workdir / "checkpoints") if name.isdigit()]
    return str(workdir / "checkpoints" / str(max(steps)))


def flat(params) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(leaf)) for leaf in jax.tree.leaves(params)])


def evaluate_command(workdir) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jcaps.evaluate", "--workdir", str(workdir)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env=command_env())


@pytest.mark.slow
def test_the_final_parameters_of_another_workdir_are_passed_over(workdir, tmp_path, config_file, cache_dir, capsys):
    # The same config from another seed: the same step folders, other parameters.
    config = config_file(CONFIG, "smoke", cache_dir)
    config.train.seed = 1
    loop.train_and_evaluate(config, str(tmp_path / "other"))
    own = load_trained(str(workdir))
    capsys.readouterr()
    other = load_trained(str(tmp_path / "other"))
    assert sorted(os.listdir(workdir / "best")) == sorted(os.listdir(tmp_path / "other" / "best"))
    assert not np.allclose(flat(own.params), flat(other.params))

    shutil.copyfile(tmp_path / "other" / FINAL_PARAMS_FILE, workdir / FINAL_PARAMS_FILE)
    served = load_trained(str(workdir))
    np.testing.assert_array_equal(flat(served.params), flat(own.params))  # read from its own checkpoints
    warning = capsys.readouterr().err.strip().splitlines()
    assert len(warning) == 1 and "is not a copy of this workdir's step" in warning[0]
    assert FINAL_PARAMS_FILE in warning[0]


@pytest.mark.slow
def test_a_renamed_token_is_one_line_naming_the_vocabulary(workdir):
    path = workdir / "checkpoints" / "vocab.json"
    vocab = json.loads(path.read_text(encoding="utf-8"))
    vocab["tokens"][5] = vocab["tokens"][5] + "x"
    path.write_text(json.dumps(vocab), encoding="utf-8")
    with pytest.raises(MismatchedWorkdir, match=f"{path} is not the file the parameters were trained with"):
        load_trained(str(workdir))
    result = evaluate_command(workdir)
    assert result.returncode == 2 and result.stdout == ""
    error, hint = result.stderr.splitlines()
    assert error.startswith(f"error: {path} is not the file") and hint.startswith("hint: ")


def test_swapped_label_names_are_refused(workdir):
    path = workdir / "checkpoints" / "labels.json"
    names = json.loads(path.read_text(encoding="utf-8"))["names"]
    names[0], names[1] = names[1], names[0]
    path.write_text(json.dumps({"names": names}), encoding="utf-8")
    with pytest.raises(MismatchedWorkdir, match="labels.json is not the file the parameters were trained with"):
        load_trained(str(workdir))


def test_a_labels_file_of_fewer_classes_than_the_model_is_one_line(workdir):
    path = workdir / "checkpoints" / "labels.json"
    path.write_text(json.dumps({"names": ["world", "sports"]}), encoding="utf-8")  # the model has 4
    with pytest.raises(MismatchedWorkdir, match="labels.json is not the file the parameters were trained with"):
        load_trained(str(workdir))


def test_a_missing_metadata_file_is_named(workdir):
    os.remove(workdir / "checkpoints" / "vocab.json")
    with pytest.raises(MismatchedWorkdir, match="vocab.json is missing"):
        load_trained(str(workdir))


def test_a_config_that_no_longer_matches_the_parameters_names_the_key_and_both_values(workdir):
    path = workdir / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    trained_with = config["model"]["embed_dim"]
    config["model"]["embed_dim"] = trained_with * 2
    path.write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(MismatchedWorkdir) as raised:
        load_trained(str(workdir))
    message = str(raised.value)
    assert message.startswith(f"{path}: model.embed_dim is {trained_with * 2}, but the parameters were trained with")
    assert message.rstrip().endswith(str(trained_with)) and "\n" not in message


def test_a_resumable_key_changed_since_training_still_loads(workdir):
    path = workdir / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    config["train"]["num_steps"] = config["train"]["num_steps"] + 20  # what a resumed run writes
    path.write_text(json.dumps(config), encoding="utf-8")
    assert load_trained(str(workdir)).config.train.num_steps == config["train"]["num_steps"]


def test_steps_saved_before_bindings_bind_nothing(workdir):
    """A workdir from before: its checksums have no binding, and a changed labels file loads as it
    did then (what changed is not known)."""
    for folder in ("checkpoints", "best"):
        for step in (name for name in os.listdir(workdir / folder) if name.isdigit()):
            path = workdir / folder / step / "checksums.json"
            record = json.loads(path.read_text(encoding="utf-8"))
            del record[BINDING_KEY]
            path.write_text(json.dumps(record), encoding="utf-8")
    labels = workdir / "checkpoints" / "labels.json"
    names = json.loads(labels.read_text(encoding="utf-8"))["names"]
    labels.write_text(json.dumps({"names": [names[1], names[0], *names[2:]]}), encoding="utf-8")
    assert list(load_trained(str(workdir)).dataset.labels.names[:2]) == [names[1], names[0]]


def test_the_binding_records_the_metadata_files_and_the_config(workdir):
    record = json.loads((workdir / "checkpoints" / os.path.basename(newest_step(workdir)) / "checksums.json")
                        .read_text(encoding="utf-8"))
    assert sorted(record[BINDING_KEY]["files"]) == ["labels.json", "vocab.json"]
    config = json.loads((workdir / "config.json").read_text(encoding="utf-8"))
    assert record[BINDING_KEY]["config"]["model"] == config["model"]


def test_a_resumed_training_refuses_a_changed_vocabulary(workdir, config_file, cache_dir):
    path = workdir / "checkpoints" / "vocab.json"
    vocab = json.loads(path.read_text(encoding="utf-8"))
    vocab["tokens"][5], vocab["tokens"][6] = vocab["tokens"][6], vocab["tokens"][5]
    path.write_text(json.dumps(vocab), encoding="utf-8")
    config = config_file(CONFIG, "smoke", cache_dir)
    config.train.num_steps += 10
    with pytest.raises(MismatchedWorkdir, match="vocab.json is not the file the parameters were trained with"):
        loop.train_and_evaluate(config, str(workdir))


def test_a_truncated_config_on_resume_is_one_line(workdir, config_file, cache_dir):
    from jcaps.errors import UserError

    path = workdir / "config.json"
    text = path.read_text(encoding="utf-8")
    path.write_text(text[: len(text) // 2], encoding="utf-8")
    with pytest.raises(UserError, match=f"{path} cannot be read: ") as raised:
        loop.train_and_evaluate(config_file(CONFIG, "smoke", cache_dir), str(workdir))
    assert "\n" not in str(raised.value)


@pytest.mark.slow
def test_the_damage_battery_at_its_tiny_size_finds_no_failure(tmp_path):
    """Four files of a text workdir, each damaged four ways, under evaluate, predict, interpret
    and a resume (benchmarks/damage_battery.py): every outcome is the undamaged answer or a
    one-line refusal."""
    from tests.tiny_runs import tiny_results

    results = tiny_results("benchmarks.damage_battery", tmp_path)
    assert results["failures"] == []
    assert results["cases"] == 16 and results["commands_run"] == 64
    assert sum(results["outcomes"].values()) == 64 and set(results["outcomes"]) == {"same", "refused"}


def test_final_lines_of_another_workdir_are_evaluated_again_on_resume(workdir, tmp_path, config_file, cache_dir):
    """metrics.jsonl copied from a workdir of another seed: its final lines name another step's
    checksums, so the resumed run evaluates its own parameters instead of reporting them."""
    from jcaps.train.metrics import read_metrics

    own = loop.train_and_evaluate(config_file(CONFIG, "smoke", cache_dir), str(workdir))
    config = config_file(CONFIG, "smoke", cache_dir)
    config.train.seed = 1
    other = loop.train_and_evaluate(config, str(tmp_path / "other"))
    assert other["test"]["loss"] != own["test"]["loss"]
    shutil.copyfile(tmp_path / "other" / "metrics.jsonl", workdir / "metrics.jsonl")
    again = loop.train_and_evaluate(config_file(CONFIG, "smoke", cache_dir), str(workdir))
    assert again["test"]["loss"] == pytest.approx(own["test"]["loss"], abs=1e-6)
    finals = [r for r in read_metrics(str(workdir)) if r.get("final")]
    assert all(r["scored"] in ("best/60", "checkpoints/60") and len(r["step_checksums"]) == 64 for r in finals[-2:])


def test_a_metrics_line_that_is_not_utf8_is_left_out_as_a_cut_short_one(tmp_path):
    from jcaps.train.metrics import read_metrics, rewind_metrics

    (tmp_path / "metrics.jsonl").write_bytes(b'{"step": 1, "split": "train"}\n{"step": 2, "sp\x90lit"}\n{"step": 3}\n')
    assert [r["step"] for r in read_metrics(str(tmp_path))] == [1, 3]
    assert rewind_metrics(str(tmp_path), 2) == 2  # the damaged line and the later one
    assert (tmp_path / "metrics.jsonl").read_bytes() == b'{"step": 1, "split": "train"}\n'
