"""Wall-clock timers of jitted calls, each call synchronised with `block_until_ready`."""

from __future__ import annotations

import statistics
import time

import jax


def median_seconds(fn, repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        jax.block_until_ready(fn())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _seconds(fn) -> float:
    start = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - start


def paired_seconds(jcaps_fn, torch_fn, repeats: int, warmup: int = 2) -> dict:
    """Times the two sides call by call in turn (jcaps, PyTorch, jcaps, ...), so that a machine
    whose speed drifts during the run slows both alike -> the median seconds of each side and
    the median, lowest and highest of the `repeats` paired ratios jcaps / PyTorch."""
    for _ in range(warmup):
        _seconds(jcaps_fn)
        _seconds(torch_fn)
    pairs = [(_seconds(jcaps_fn), _seconds(torch_fn)) for _ in range(repeats)]
    ratios = [jcaps_s / torch_s for jcaps_s, torch_s in pairs]
    return {"jcaps_s": statistics.median(j for j, _ in pairs), "torch_s": statistics.median(t for _, t in pairs),
            "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)}
