"""Training studies: many `train.py` runs of one command each, resumable, two at a time.

A run is a workdir and the flags `train.py` gets. `train_pending` trains the runs that have no
final test metrics yet, `jobs` at a time, each pinned to its own CPU core (Linux `taskset`), and
appends each run's output to WORKDIR/train.log. A run that was killed resumes from its last
checkpoint when its command runs again, so a study survives interruptions: run the same study
command again.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from studies import ROOT


def final_test_metrics(workdir: str) -> dict | None:
    """The last final test record of WORKDIR/metrics.jsonl, or None while the run is unfinished."""
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        finals = [r for r in map(json.loads, f) if r.get("final") and r.get("split") == "test"]
    return finals[-1] if finals else None


def wall_seconds(log: str) -> int:
    """The wall times train.py printed in a run's train.log, summed over its invocations (one
    that was killed printed none)."""
    return sum(int(h) * 3600 + int(m) * 60 + int(s) for h, m, s in re.findall(r"wall time (\d+):(\d\d):(\d\d)", log))


def training_record(workdir: str) -> dict:
    """Steps and epochs trained, the step selected, the median progress rate, the wall time
    train.py printed (summed over its invocations) and how often the run resumed, from the run's
    final test record and WORKDIR/train.log."""
    with open(os.path.join(workdir, "train.log"), encoding="utf-8") as f:
        log = f.read()
    final = final_test_metrics(workdir)
    rates = [float(r) for r in re.findall(r"\| ([0-9.]+) steps/s \|", log)[1:]]
    steps = int(final["step"])
    steps_per_epoch = re.search(r"\((\d+) per epoch\)", log)
    return {
        "steps": steps,
        "epochs": round(steps / int(steps_per_epoch.group(1)), 2) if steps_per_epoch else None,
        "selected_step": int(final.get("selected_step", steps)),
        "steps_per_s": round(statistics.median(rates), 2) if rates else None,
        "seconds": wall_seconds(log),
        "resumed": log.count("Resuming from step"),
    }


def train_command(flags: list[str], module: str | None = None) -> list[str]:
    """`train.py FLAGS`, or `python -m MODULE FLAGS` for a study's own entry point (one that
    adds its model variants to the model table first)."""
    return [sys.executable, *(["-m", module] if module else [os.path.join(ROOT, "train.py")]), *flags]


def train_pending(runs: list[tuple[str, list[str]]], jobs: int, on_start: Callable[[str], None] | None = None,
                  module: str | None = None) -> None:
    """Trains each (workdir, train.py flags) without final test metrics, `jobs` at a time, with
    `train_command(flags, module)`; `on_start(workdir)` is called as each starts."""
    pending = [(workdir, flags) for workdir, flags in runs if final_test_metrics(workdir) is None]
    running: list[tuple[str, subprocess.Popen, float, int]] = []
    free_cores = list(range(jobs))
    while pending or running:
        while pending and free_cores:
            (workdir, flags), core = pending.pop(0), free_cores.pop(0)
            os.makedirs(workdir, exist_ok=True)
            if on_start:
                on_start(workdir)
            cmd = train_command(flags, module)
            if jobs > 1 and shutil.which("taskset"):
                cmd = ["taskset", "-c", str(core), *cmd]
            print(f"training {os.path.basename(workdir)} (log: {workdir}/train.log)", flush=True)
            with open(os.path.join(workdir, "train.log"), "a", encoding="utf-8") as log:  # the child keeps its copy
                process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
            running.append((workdir, process, time.perf_counter(), core))
        time.sleep(2)
        for item in list(running):
            workdir, process, start, core = item
            if process.poll() is None:
                continue
            running.remove(item)
            free_cores.append(core)
            if process.returncode != 0:
                raise SystemExit(f"{workdir} failed (exit {process.returncode}); see {workdir}/train.log")
            print(f"{os.path.basename(workdir)} done in {time.perf_counter() - start:.0f} s", flush=True)
