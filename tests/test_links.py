"""No write follows a symbolic link (`jcaps.files`): a workdir from someone else that plants links
where jcaps writes (a report, a lock, an output folder) never gets a file outside it written; a
link is replaced (files jcaps replaces whole) or refused in one line (files it appends to or
locks, folders it writes into)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from jcaps import files
from tests.command_env import command_env
from tests.workdir_flags import own_data_cache

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECRET = "the user's own file\n"


@pytest.fixture()
def outside(tmp_path):
    """A file outside every workdir that a link points at (a `.bashrc`, say)."""
    path = tmp_path / "outside" / "bashrc"
    path.parent.mkdir()
    path.write_text(SECRET)
    return path


def test_a_replaced_file_replaces_the_link_not_its_target(tmp_path, outside):
    link = tmp_path / "report.html"
    link.symlink_to(outside)
    files.replace_file(link, "<html></html>")
    assert not link.is_symlink() and link.read_text() == "<html></html>"
    assert outside.read_text() == SECRET
    assert sorted(os.listdir(tmp_path)) == ["outside", "report.html"]  # no temporary file left


def test_a_failed_replacement_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("old")
    with pytest.raises(RuntimeError), files.replacing(path) as f:
        f.write("half")
        raise RuntimeError("the disk filled")
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["config.json"]


def test_appending_or_locking_through_a_link_is_refused(tmp_path, outside):
    link = tmp_path / "metrics.jsonl"
    link.symlink_to(outside)
    with pytest.raises(files.LinkRefused, match="metrics.jsonl is a symbolic link"):
        open(link, "a", opener=files.no_follow)  # noqa: SIM115 (refused before a file is open)
    with open(tmp_path / "new.jsonl", "a", opener=files.no_follow) as f:
        f.write("line\n")
    assert (tmp_path / "new.jsonl").read_text() == "line\n" and outside.read_text() == SECRET
    folder = tmp_path / "checkpoints"
    folder.symlink_to(outside.parent)
    with pytest.raises(files.LinkRefused, match="checkpoints is a symbolic link"):
        files.refuse_linked_folder(folder)


def run(*args):
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=command_env(), capture_output=True, text=True,
                          timeout=300)


def assert_refused(result, fragment: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) <= 2 and lines[0].startswith("error: ") and fragment in lines[0], result.stderr


@pytest.fixture()
def workdir(tmp_path, trained_smoke_workdir):
    """A copy of the session's fastText `:smoke` workdir, as if from someone else."""
    copy = tmp_path / "theirs"
    shutil.copytree(trained_smoke_workdir("fasttext_ag_news.py")[0], copy)
    return copy


@pytest.mark.slow
def test_an_explanation_run_writes_through_no_link_of_a_foreign_workdir(workdir, outside, tmp_path):
    interpretation = workdir / "interpretation"
    interpretation.mkdir()
    (interpretation / "report.html").symlink_to(outside)
    explained = run("-m", "jcaps.interpret", "--workdir", str(workdir), own_data_cache(workdir), "--limit", "4",
                    "--methods", "occlusion")
    assert explained.returncode == 0, explained.stderr
    assert not (interpretation / "report.html").is_symlink() and outside.read_text() == SECRET

    shutil.rmtree(interpretation)  # a new run's folder, whose lock is a link
    interpretation.mkdir()
    (interpretation / ".lock").symlink_to(outside)
    assert_refused(run("-m", "jcaps.interpret", "--workdir", str(workdir), own_data_cache(workdir), "--limit", "4",
                       "--methods", "occlusion"), ".lock is a symbolic link")

    shutil.rmtree(interpretation)
    interpretation.symlink_to(outside.parent)
    assert_refused(run("-m", "jcaps.interpret", "--workdir", str(workdir), own_data_cache(workdir), "--limit", "4",
                       "--methods", "occlusion"), "interpretation is a symbolic link")
    assert os.listdir(outside.parent) == ["bashrc"] and outside.read_text() == SECRET

    chosen = tmp_path / "out"
    chosen.mkdir()
    (chosen / "report.html").symlink_to(outside)
    explained = run("-m", "jcaps.interpret", "--workdir", str(workdir), own_data_cache(workdir), "--limit", "4",
                    "--methods", "occlusion", "--out", str(chosen))
    assert explained.returncode == 0, explained.stderr
    assert not (chosen / "report.html").is_symlink() and outside.read_text() == SECRET


@pytest.mark.slow
@pytest.mark.parametrize("planted", [".lock", "tensorboard", "checkpoints"])
def test_training_writes_through_no_link_of_a_foreign_workdir(workdir, outside, planted):
    target = workdir / planted
    if target.is_dir():
        shutil.rmtree(target)
    else:
        target.unlink()
    target.symlink_to(outside if planted == ".lock" else outside.parent)
    assert_refused(run("train.py", "--config", "configs/fasttext_ag_news.py:smoke", "--workdir", str(workdir),
                       own_data_cache(workdir), "--config.train.num_steps=70"), f"{planted} is a symbolic link")
    assert os.listdir(outside.parent) == ["bashrc"] and outside.read_text() == SECRET
