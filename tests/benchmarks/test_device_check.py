"""`benchmarks/device_check.sh OUT --dry-run`: every step of the accelerator check runs on the
CPU at its smallest, and OUT holds the eight flat files the device tool brings back, each with
what the summary and the docs read from it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from tests.command_env import command_env
from tests.tiny_runs import ROOT

pytestmark = pytest.mark.slow

STEPS = ["environment", "tests", "rnn_impl", "run_all_float32", "run_all_bfloat16", "ag_news_training",
         "ag_news_evaluation"]
FILES = {"environment.json", "tests.xml", "rnn_impl.json", "run_all_float32.json", "run_all_bfloat16.json",
         "ag_news.json", "summary.json", "log.txt"}


def test_dry_run_writes_every_file_the_device_run_brings_back(tmp_path):
    out = tmp_path / "out"
    # One CPU device, as the GPU machine has one GPU (the suite's two would split batches of 4).
    env = command_env(PYTHON=sys.executable, DEVICE_CHECK_MODELS="fasttext_ag_news")
    env.pop("JAX_PLATFORMS", None)
    result = subprocess.run(["bash", "benchmarks/device_check.sh", str(out), "--dry-run"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # The device tool brings back at most 8 plain files, named in letters, digits, '.', '_', '-'.
    assert set(os.listdir(out)) == FILES
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+", name) for name in FILES)

    with open(out / "summary.json", encoding="utf-8") as f:
        summary = json.load(f)
    assert list(summary["steps"]) == STEPS
    assert all(step["exit"] == 0 and step["seconds"] > 0 for step in summary["steps"].values())
    environment = summary["_run"]
    assert environment["dry_run"] and environment["backend"] == "cpu"
    assert environment["jax"] and environment["jaxlib"] and environment["commit"]
    # The GPU tests are found, and skipped on the CPU.
    assert summary["tests"]["tests"] > 0 and summary["tests"]["skipped"] == summary["tests"]["tests"]
    assert summary["rnn_impl"]["cudnn_ran"] is False and summary["rnn_impl"]["max_abs_output_difference"] == 0.0
    for dtype in ("float32", "bfloat16"):
        speed = summary["run_all"][dtype]
        assert speed["dtype"] == dtype and list(speed["models"]) == ["fasttext_ag_news"]
        assert speed["models"]["fasttext_ag_news"]["train_examples_per_s"] > 0
    ag_news = summary["ag_news"]
    assert ag_news["config"] == "configs/icapsnet_short_ag_news.py:smoke"
    assert ag_news["test"]["accuracy"] > 0.5 and ag_news["training_seconds"] > 0
    [run], [step] = ag_news["run_examples_per_s"], ag_news["step_examples_per_s"]
    assert 0 < ag_news["loop_efficiency"] == run / step
    assert 0 < ag_news["training_wall_seconds"] < ag_news["training_seconds"]
    with open(out / "ag_news.json", encoding="utf-8") as f:
        assert json.load(f) == ag_news


def test_a_cpu_is_refused_outside_a_dry_run(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, JAX_PLATFORMS="cpu")
    result = subprocess.run([sys.executable, "-m", "benchmarks.device_summary", "environment",
                             str(tmp_path / "environment.json"), "--commit-file", str(tmp_path / "commit"),
                             "--dry-run", "false"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode != 0
    assert "needs a GPU backend; JAX sees 'cpu'" in result.stderr
