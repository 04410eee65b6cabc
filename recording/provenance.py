"""What a benchmark's or a study's numbers were measured on: the code, the day, the machine and
its load.

    results["_run"] = run_metadata(tiny=args.tiny)   # at the start of the run, before timing

`run_metadata` returns {"commit" (git short hash of HEAD), "dirty" (tracked files other than the
results files, `RESULTS_PATHSPECS`, differ from it), "date", "cores", "device" (JAX's first
device), "load_average_before" (the 1-minute load average when it was called), "idle" (that load
under `IDLE_LOAD`), "tiny"}. Every benchmark and study writes it under "_run" in its
results.json, so that a number read later says whether it is still the code's and whether the
machine was busy when it was measured.
"""

from __future__ import annotations

import os
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A 1-minute load average under this: nothing else was running (on 2 cores, one busy process
# reads about 1).
IDLE_LOAD = 0.5
# The committed results files (the speed suite's, each study's), left out of "dirty": writing
# them is what a run does.
RESULTS_PATHSPECS = (":!benchmarks/results", ":!studies/*/results")


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)


def run_metadata(tiny: bool, load_average_before: float | None = None) -> dict:
    """The run's provenance; `load_average_before`: the load read when the run started, where
    that was earlier than this call (default: now). Imports JAX and starts its backend."""
    import jax

    load = os.getloadavg()[0] if load_average_before is None else load_average_before
    commit = _git("rev-parse", "--short", "HEAD").stdout.strip() or None
    # `git diff --quiet HEAD` exits 1 where a tracked file differs from the commit.
    dirty = _git("diff", "--quiet", "HEAD", "--", ".", *RESULTS_PATHSPECS).returncode != 0 if commit else None
    return {"commit": commit, "dirty": dirty, "date": time.strftime("%Y-%m-%d"), "cores": os.cpu_count(),
            "device": jax.devices()[0].device_kind, "load_average_before": load, "idle": load < IDLE_LOAD,
            "tiny": tiny}
