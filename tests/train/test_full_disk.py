"""A full disk on a real filesystem: a small tmpfs, filled but for a few kilobytes, holds the
workdir (or an explanation run's --out). Wherever the disk fills (the vocabulary, the config,
TensorBoard, a `best/` save, a checkpoint), the command stops with exit 2 and at most two lines
on stderr, the error and its hint in the command's own words: no orbax or tensorboardX traceback
after them. The failing writes of every kind are also tested on a failing writer
(tests/train/test_checkpoint_faults.py); this is the filesystem's own ENOSPC, where libraries'
threads and exit handlers fail too. Needs root (to mount)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.command_env import command_env
from tests.workdir_flags import own_data_cache

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs, unmounted after the test; `fill(kib)` leaves `kib` KiB free on it."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                                           capture_output=True).returncode:
        pytest.skip("needs root and a mountable tmpfs")

    def fill(kib: int):
        filler = mount / "filler"
        filler.unlink(missing_ok=True)
        stats = os.statvfs(mount)
        filler.write_bytes(b"\0" * max(0, stats.f_bavail * stats.f_frsize - kib * 1024))
        return mount

    try:
        yield fill
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def stderr_lines(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.parametrize("free_kib", [16, 48, 300])
def test_training_on_a_full_disk_is_one_error_and_its_hint(small_disk, free_kib, cache_dir):
    disk = small_disk(free_kib)
    result = subprocess.run(
        [sys.executable, "train.py", "--config", "configs/fasttext_ag_news.py:smoke", "--workdir", str(disk / "w"),
         f"--config.data.cache_dir={cache_dir}", "--config.train.progress=none"],
        cwd=ROOT, capture_output=True, text=True, env=command_env(), timeout=300)
    assert result.returncode == 2, result.stderr
    error, hint = stderr_lines(result)
    assert error.startswith("error: cannot ") and "no space left on the device" in error
    assert hint.startswith("hint: free some space") and "resumes from the last checkpoint saved" in hint
    if free_kib >= 48:  # room for the run's small files: the disk fills at a save of parameters
        assert "cannot save the " in error


@pytest.mark.slow
def test_an_explanation_run_on_a_full_disk_is_one_error_and_its_own_hint(small_disk, trained_smoke_workdir):
    workdir, _ = trained_smoke_workdir("fasttext_ag_news.py")
    disk = small_disk(4)
    result = subprocess.run(
        [sys.executable, "-m", "jcaps.interpret", "--workdir", str(workdir), own_data_cache(workdir),
         "--out", str(disk / "out"), "--limit", "8", "--methods", "gradient", "--progress", "none"],
        cwd=ROOT, capture_output=True, text=True, env=command_env(), timeout=300)
    assert result.returncode == 2, result.stderr
    error, hint = stderr_lines(result)
    assert error.startswith("error: cannot write ") and "no space left on the device" in error
    assert hint.startswith("hint: free some space") and "resumes from the explanations already written" in hint
