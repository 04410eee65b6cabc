"""WORKDIR/final_params.msgpack: written by a training that ends, read while it describes the
workdir, never trusted when it does not."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest

from jcaps.train import final_params

PARAMS = {"dense": {"kernel": np.arange(12, dtype=np.float32).reshape(3, 4), "bias": np.ones(4, np.float32)},
          "embedding": {"embedding": np.linspace(-1, 1, 10, dtype=np.float32).reshape(5, 2)}}


def workdir_with_steps(root, checkpoints=("10", "20"), best=("10",)) -> str:
    for folder, steps in (("checkpoints", checkpoints), ("best", best)):
        for step in steps:
            os.makedirs(os.path.join(root, folder, step))
    os.makedirs(os.path.join(root, "checkpoints", "5.damaged"))  # not a step: not listed
    return str(root)


def written(root, params=PARAMS, **record) -> tuple[str, list[str]]:
    workdir, warnings = workdir_with_steps(root), []
    record = {"parameters": "best", "selected_step": 10, "last_step": 20} | record
    final_params.write(workdir, params, warn=warnings.append, **record)
    return workdir, warnings


def assert_same_tree(a, b):
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], dict):
            assert_same_tree(a[key], b[key])
        else:
            np.testing.assert_array_equal(a[key], b[key])
            assert a[key].dtype == b[key].dtype


def test_the_parameters_read_back_exactly_with_what_they_are(tmp_path):
    workdir, warnings = written(tmp_path)
    assert warnings == [] and sorted(os.listdir(workdir)) == ["best", "checkpoints", final_params.FINAL_PARAMS_FILE]
    params, which, selected, last = final_params.read(workdir, "final", True, warnings.append)
    assert_same_tree(params, PARAMS)
    assert (which, selected, last) == ("best", 10, 20) and warnings == []


def test_the_steps_are_listed_as_they_stand(tmp_path):
    workdir = workdir_with_steps(tmp_path, checkpoints=("100", "20"), best=())
    assert final_params.saved_steps(workdir) == (("100", "20"), ())
    assert final_params.saved_steps(str(tmp_path / "missing")) == ((), ())


@pytest.mark.parametrize("change", ["new checkpoint", "new best", "deleted step"])
def test_a_workdir_whose_steps_changed_since_is_read_from_its_checkpoints(tmp_path, change):
    """A training resumed since, or one writing the workdir now: the file is not used, silently."""
    workdir, warnings = written(tmp_path)
    if change == "new checkpoint":
        os.makedirs(os.path.join(workdir, "checkpoints", "30"))
    elif change == "new best":
        os.rename(os.path.join(workdir, "best", "10"), os.path.join(workdir, "best", "20"))
    else:
        os.rmdir(os.path.join(workdir, "checkpoints", "10"))
    assert final_params.read(workdir, "final", True, warnings.append) is None and warnings == []


@pytest.mark.parametrize("parameters,select_best", [("last", True), ("final", False)])
def test_the_last_parameters_are_served_only_when_they_are_the_final_ones(tmp_path, parameters, select_best):
    """Asked for (`--parameters last`), or final because the config no longer selects the best."""
    workdir, warnings = written(tmp_path / "best_before_last")
    assert final_params.read(workdir, parameters, select_best, warnings.append) is None
    workdir, warnings = written(tmp_path / "best_at_last", selected_step=20)
    _, which, selected, last = final_params.read(workdir, parameters, select_best, warnings.append)
    assert (which, selected, last) == ("last", 20, 20) and warnings == []
    assert final_params.read(workdir, "final", True, warnings.append)[1] == "best"


def test_a_missing_file_is_read_from_the_checkpoints_without_a_word(tmp_path):
    warnings = []
    assert final_params.read(workdir_with_steps(tmp_path), "final", True, warnings.append) is None and warnings == []


def test_non_finite_parameters_are_left_to_the_checkpoints_to_refuse(tmp_path):
    nan = {"dense": {"kernel": np.array([1.0, np.nan], np.float32)}}
    workdir, warnings = written(tmp_path, params=nan)
    assert final_params.read(workdir, "final", True, warnings.append) is None and warnings == []


def damage_flip(path: Path):
    data = bytearray(path.read_bytes())
    data[data.find(PARAMS["dense"]["kernel"].tobytes()) + 5] ^= 0xFF  # one value of one array
    path.write_bytes(bytes(data))


def damage_truncate(path: Path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def damage_replace(path: Path):
    path.write_bytes(b"\x93\x01\x02\x03")  # msgpack, but a list


@pytest.mark.parametrize("damage,problem", [
    (damage_flip, "does not match its checksum (it is damaged)"),
    (damage_truncate, "cannot be read ("),
    (damage_replace, "is not a final parameters file of this jcaps"),
])
def test_a_damaged_file_is_named_in_one_warning_and_the_checkpoints_are_read(tmp_path, damage, problem):
    workdir, warnings = written(tmp_path)
    path = os.path.join(workdir, final_params.FINAL_PARAMS_FILE)
    damage(Path(path))
    assert final_params.read(workdir, "final", True, warnings.append) is None
    [line] = warnings
    assert line.startswith(f"warning: {path} {problem}") and line.endswith("reading the checkpoints instead"), line


def test_a_failed_write_costs_one_warning_and_leaves_no_file(tmp_path, monkeypatch):
    def full_disk(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(final_params.os, "replace", full_disk)
    workdir, warnings = written(tmp_path)
    [line] = warnings
    path = os.path.join(workdir, final_params.FINAL_PARAMS_FILE)
    assert line.startswith(f"warning: cannot write {path} (No space left on device)")
    assert "read the final parameters from the checkpoints" in line
    assert sorted(os.listdir(workdir)) == ["best", "checkpoints"]


@pytest.mark.slow
def test_a_trained_workdir_loads_the_same_model_with_and_without_it(trained_smoke_workdir, monkeypatch):
    """The file training wrote, against the checkpoints it copies: the same parameters, exactly,
    and the same account of which they are."""
    import jax

    from jcaps.train import workdir as workdir_lib

    workdir = str(trained_smoke_workdir("fasttext_ag_news.py")[0])
    assert os.path.isfile(os.path.join(workdir, final_params.FINAL_PARAMS_FILE))
    with monkeypatch.context() as patch:
        patch.setattr(workdir_lib, "_read_params", lambda *args: pytest.fail("read the checkpoints"))
        from_file = workdir_lib.load_trained(workdir)
    with monkeypatch.context() as patch:
        patch.setattr(final_params, "read", lambda *args: None)
        from_checkpoints = workdir_lib.load_trained(workdir)
    assert from_file.selection == from_checkpoints.selection
    assert from_file.selection["parameters"] == "best"
    jax.tree.map(np.testing.assert_array_equal, from_file.params, from_checkpoints.params)
    assert jax.tree.map(lambda x: x.sharding, from_file.params) == jax.tree.map(lambda x: x.sharding,
                                                                                  from_checkpoints.params)
