"""Two CPU processes with four devices each train like one process with eight, and their checkpoint
restores in a single-process run (jax.distributed over localhost, gloo collectives). Eight
devices split the `:smoke` batch of 16 two examples a device, as finely as the tests split it."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

from tests.command_env import command_env

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMOKE = os.path.join(ROOT, "configs", "fasttext_ag_news.py") + ":smoke"


def command(workdir, cache_dir, num_steps: int, *flags):
    return [sys.executable, os.path.join(ROOT, "train.py"), "--config", SMOKE, "--workdir", str(workdir),
            f"--config.data.cache_dir={cache_dir}", f"--config.train.num_steps={num_steps}",
            "--config.train.checkpoint_every_steps=6", "--config.train.log_every_steps=1",
            "--config.train.progress=none", *flags]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def train_losses(workdir) -> dict[int, float]:
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        return {m["step"]: m["loss"] for m in map(json.loads, f) if m["split"] == "train"}


@pytest.fixture(scope="session")
def runs(built_once, cache_dir):
    """(folder, the two processes' output): the smoke config trained 12 steps by one process on 8
    devices (folder/single) and by two processes on 4 devices each (folder/two), once a session
    (`built_once`)."""

    def train(root):
        single = subprocess.run(command(root / "single", cache_dir, 12), env=command_env(8), cwd=ROOT,
                                capture_output=True, text=True, timeout=300)
        assert single.returncode == 0, single.stdout + single.stderr
        port = free_port()
        processes = [
            subprocess.Popen(
                command(root / "two", cache_dir, 12, "--num_processes=2", f"--process_id={i}",
                        f"--coordinator_address=localhost:{port}"),
                env=command_env(4), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )
            for i in range(2)
        ]
        outputs = [p.communicate(timeout=300)[0] for p in processes]
        for process, output in zip(processes, outputs):
            assert process.returncode == 0, output
        return outputs

    return built_once("multiprocess", train)


def test_two_processes_match_one_process_with_as_many_devices(runs):
    root, outputs = runs
    single, two = train_losses(root / "single"), train_losses(root / "two")
    assert sorted(single) == sorted(two) == list(range(1, 13))
    assert max(abs(single[step] - two[step]) for step in single) < 1e-5
    # Only process 0 reports.
    assert "final test" in outputs[0] and "final test" not in outputs[1]


def test_a_two_process_checkpoint_restores_in_one_process(runs, tmp_path, cache_dir):
    workdir = tmp_path / "two"
    shutil.copytree(runs[0] / "two", workdir)
    resumed = subprocess.run(command(workdir, cache_dir, 18), env=command_env(1), cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "Resuming from step 12" in resumed.stdout
    assert sorted(train_losses(workdir)) == list(range(1, 19))


def test_num_processes_needs_a_coordinator(tmp_path):
    result = subprocess.run(command(tmp_path / "w", tmp_path / "cache", 2, "--num_processes=2"), env=command_env(1),
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "--coordinator_address" in result.stderr


def free_slurm_port() -> tuple[int, int]:
    """(job id, port): a free port of the range from which JAX's Slurm detection picks the
    coordinator's port (61440 + job id % 4096), and a job id that picks it."""
    for port in range(61440, 65536):
        with socket.socket() as s:
            try:
                s.bind(("localhost", port))
            except OSError:
                continue
        return port - 61440, port
    raise RuntimeError("no free port in 61440..65535")


def test_processes_a_cluster_started_join_by_themselves_as_with_the_flags(runs, tmp_path, cache_dir):
    """Two processes started with the variables a Slurm launcher sets (`srun -n 2` on one node), and
    no process flag, find each other through `jax.distributed.initialize()`'s own detection and
    train as the two started with explicit flags did."""
    job_id, _ = free_slurm_port()
    slurm = {"SLURM_JOB_ID": str(job_id), "SLURM_STEP_NODELIST": "localhost", "SLURM_NTASKS": "2"}
    processes = [
        subprocess.Popen(command(tmp_path / "auto", cache_dir, 12),
                         env=command_env(4, **slurm, SLURM_PROCID=str(i), SLURM_LOCALID=str(i)), cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for i in range(2)
    ]
    outputs = [p.communicate(timeout=300)[0] for p in processes]
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output
    assert "final test" in outputs[0] and "final test" not in outputs[1]
    assert train_losses(tmp_path / "auto") == train_losses(runs[0] / "two")


def test_num_processes_auto_outside_a_cluster_is_one_line(tmp_path):
    result = subprocess.run(command(tmp_path / "w", tmp_path / "cache", 2, "--num_processes=auto"),
                            env=command_env(1), cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("error: jax.distributed could not join the processes: "), result.stderr
    assert "Traceback" not in result.stderr
