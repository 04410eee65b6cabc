"""Runs a script of the speed suite or of the studies at its tiny size, and checks what every
one of them writes: its results.json and the run's provenance under "_run"."""

from __future__ import annotations

import datetime
import json
import math
import os
import re
import subprocess
import sys

from tests.command_env import command_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_KEYS = {"commit", "dirty", "date", "cores", "device", "load_average_before", "idle", "tiny"}


def run_tiny(module: str, *args: str) -> None:
    """`python -m MODULE --tiny ARGS` on one CPU device; fails with its output."""
    env = command_env()
    result = subprocess.run([sys.executable, "-m", module, "--tiny", *args], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def tiny_results(module: str, out, *args: str) -> dict:
    """results.json of `run_tiny(module, "--out", out, *args)`, its "_run" checked."""
    run_tiny(module, "--out", str(out), *args)
    with open(os.path.join(out, "results.json"), encoding="utf-8") as f:
        results = json.load(f)
    assert_run_metadata(results["_run"])
    return results


def assert_run_metadata(run: dict) -> None:
    assert RUN_KEYS <= set(run)
    assert run["tiny"] is True
    assert re.fullmatch(r"[0-9a-f]{4,40}", run["commit"]) and isinstance(run["dirty"], bool)
    datetime.date.fromisoformat(run["date"])
    assert run["cores"] == os.cpu_count() and run["device"]
    assert run["load_average_before"] >= 0 and run["idle"] == (run["load_average_before"] < 0.5)


def assert_positive(row: dict, *keys: str) -> None:
    """Each of `keys` is a finite number above 0."""
    for key in keys:
        assert isinstance(row[key], (int, float)) and math.isfinite(row[key]) and row[key] > 0, (key, row[key])
