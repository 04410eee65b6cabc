"""The live progress line: step, loss, steps/s and ETA (a tqdm bar on a terminal, lines in CI)."""

from __future__ import annotations

import os
import sys
import time

from jcaps.errors import ConfigError


def _mode(requested: str) -> str:
    if requested != "auto":
        return requested
    if os.environ.get("CI") or not sys.stderr.isatty():
        return "lines"
    return "bar"


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class Progress:
    """`mode`: bar | lines | none | auto (bar on a terminal, lines otherwise)."""

    def __init__(self, mode: str, total: int, initial: int = 0, enabled: bool = True):
        self._mode = _mode(mode) if enabled else "none"
        if self._mode not in ("bar", "lines", "none"):
            raise ConfigError(f"train.progress must be auto, bar, lines or none, not {mode!r}")
        self._total, self._start_step, self._start = total, initial, time.perf_counter()
        self._bar = None
        if self._mode == "bar":
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True)

    def update(self, step: int, metrics: dict) -> None:
        if self._bar is not None:
            self._bar.update(step - self._bar.n)
            self._bar.set_postfix({k: f"{metrics[k]:.4f}" for k in ("loss", "accuracy") if k in metrics})
        elif self._mode == "lines":
            elapsed = time.perf_counter() - self._start
            rate = (step - self._start_step) / max(elapsed, 1e-9)
            eta = (self._total - step) / rate if rate > 0 else float("inf")
            shown = " | ".join(f"{k} {metrics[k]:.4f}" for k in ("loss", "accuracy") if k in metrics)
            print(
                f"step {step}/{self._total} ({100 * step / self._total:.0f}%) | {shown} | "
                f"{rate:.1f} steps/s | ETA {_duration(eta) if eta != float('inf') else '?'}",
                flush=True,
            )

    def message(self, text: str) -> None:
        if self._bar is not None:
            self._bar.write(text)
        elif self._mode == "lines":
            print(text, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
