"""The console of a training run: quiet libraries, the live progress line (step, loss, steps/s and ETA; a tqdm bar
on a terminal, lines in CI) and the summary printed at the end.

Rates count from the end of the first step a process runs (`Progress.start`), and leave out
the first evaluation (`Progress.not_counted`), so the time spent compiling the train and eval
steps does not inflate the ETA. The summary's rate leaves out every compile after the first step
too (another length bucket, the eval step: `CompileClock`), so that it is the loop's own speed,
evaluations and checkpoints included."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
from collections.abc import Callable

from jcaps.errors import ConfigError


def _mode(requested: str) -> str:
    if requested != "auto":
        return requested
    if os.environ.get("CI") or not sys.stderr.isatty():
        return "lines"
    return "bar"


def quiet_libraries() -> None:
    """orbax logs every save at INFO and TFDS draws progress bars: keep the console for jcaps."""
    import tensorflow_datasets as tfds
    from absl import logging

    logging.set_verbosity(logging.ERROR)
    tfds.disable_progress_bar()


# jax.monitoring's events of making a program: tracing, lowering, and XLA's compile (a
# persistent-cache hit records none of the last).
COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


class CompileClock:
    """Seconds this process has spent making programs (`COMPILE_EVENTS`) since the first
    `CompileClock` was made. jax.monitoring keeps its listeners for the life of the process, so
    one listener serves every clock."""

    _seconds = 0.0
    _listening = False

    def __init__(self):
        if not CompileClock._listening:
            import jax.monitoring

            jax.monitoring.register_event_duration_secs_listener(CompileClock._count)
            CompileClock._listening = True

    @staticmethod
    def _count(event: str, duration: float, **_) -> None:
        if event in COMPILE_EVENTS:
            CompileClock._seconds += duration

    def seconds(self) -> float:
        return CompileClock._seconds


@dataclasses.dataclass(frozen=True)
class TrainedSteps:
    """What a process's training loop ran: `steps` in `seconds`, of which the first step took
    `first_seconds` (None if none ran; mostly compiling) and compiles after it
    `later_compile_seconds`."""

    steps: int
    seconds: float
    first_seconds: float | None
    later_compile_seconds: float = 0.0


def duration(seconds: float) -> str:
    """H:MM:SS."""
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class Progress:
    """`mode`: bar | lines | none | auto (bar on a terminal, lines otherwise). `clock`: seconds
    (`time.perf_counter`; tests pass a fake one). `unit`: what is counted, "step" (training) or
    "example" (an explanation run)."""

    def __init__(
        self,
        mode: str,
        total: int,
        initial: int = 0,
        enabled: bool = True,
        clock: Callable[[], float] = time.perf_counter,
        unit: str = "step",
    ):
        self._mode = _mode(mode) if enabled else "none"
        if self._mode not in ("bar", "lines", "none"):
            raise ConfigError(f"train.progress must be auto, bar, lines or none, not {mode!r}")
        self._total, self._initial, self._clock, self._unit = total, initial, clock, unit
        self._created = clock()
        self._started: tuple[int, float] | None = None  # (step, time) at the end of the first step
        self._bar = None

    def start(self, step: int) -> None:
        """The first step this process runs has finished at `step` (compiled and run): rates
        count from here on."""
        if self._started is not None:
            return
        self._started = (step, self._clock())
        if self._mode == "bar":
            from tqdm import tqdm

            # Made now, so that tqdm's own rate leaves out the compile too.
            self._bar = tqdm(total=self._total, initial=step, unit=self._unit, dynamic_ncols=True)

    @contextlib.contextmanager
    def not_counted(self):
        """Time spent inside is left out of the rate (the first evaluation, which compiles)."""
        begin = self._clock()
        try:
            yield
        finally:
            if self._started is not None:
                step, since = self._started
                self._started = (step, since + self._clock() - begin)

    def steps_per_second(self, step: int) -> float | None:
        """Steps a second since `start` (None before a step beyond it has finished); once the
        last step has finished, and no later step than the first can give a rate (a run of one
        batch), the whole run's, compiling included."""
        if self._started is None or step <= self._started[0]:
            if step >= self._total and step > self._initial:
                return (step - self._initial) / max(self._clock() - self._created, 1e-9)
            return None
        first, since = self._started
        return (step - first) / max(self._clock() - since, 1e-9)

    def update(self, step: int, metrics: dict) -> None:
        self.start(step)
        shown = {k: metrics[k] for k in ("loss", "accuracy") if k in metrics}
        if self._bar is not None:
            self._bar.update(step - self._bar.n)
            self._bar.set_postfix({k: f"{v:.4f}" for k, v in shown.items()})
        elif self._mode == "lines":
            rate = self.steps_per_second(step)
            unit = self._unit + "s"
            speed = (
                f"{rate:.1f} {unit}/s | ETA {duration((self._total - step) / rate)}" if rate else f"? {unit}/s | ETA ?"
            )
            values = "".join(f"{k} {v:.4f} | " for k, v in shown.items())
            print(
                f"{self._unit} {step}/{self._total} ({100 * step / max(self._total, 1):.0f}%) | {values}{speed}",
                flush=True,
            )

    def message(self, text: str) -> None:
        if self._bar is not None:
            self._bar.write(text)
        elif self._mode != "none":
            print(text, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def format_metrics(metrics: dict) -> str:
    return " ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in metrics.items())


def run_summary(
    *,
    workdir: str,
    step: int,
    final: dict[str, dict],
    selected: dict | None,
    select_best: bool,
    trained: TrainedSteps | None,
    wall_seconds: float | None,
    checkpoint_step: int | None,
    best_step: int | None,
) -> str:
    """The end-of-run summary: what was trained, which parameters were evaluated, the final
    metrics, and where everything is.

    `selected`: `{"step", "metric", "value"}` of the best validation evaluation, or None.
    `trained`: what this process's loop ran, or None.
    """
    lines = []
    if trained is not None:
        steps, seconds, first, compiling = (
            trained.steps,
            trained.seconds,
            trained.first_seconds,
            trained.later_compile_seconds,
        )
        timing = f"{steps} steps in {duration(seconds)}"
        if first is not None and steps > 1:
            rate = (steps - 1) / max(seconds - first - compiling, 1e-9)
            left_out = f", {compiling:.1f} s of compiling left out" if compiling >= 0.05 else ""
            timing += (
                f" (the first, with compiling, {first:.1f} s; then {rate:.1f} steps/s with evaluations and "
                f"checkpoints{left_out})"
            )
        lines.append(
            f"trained to step {step}: {timing}" + (f"; wall time {duration(wall_seconds)}" if wall_seconds else "")
        )
    if selected is not None and selected["step"] != step:
        lines.append(
            f"final model: step {selected['step']}, the best validation {selected['metric']} "
            f"({selected['value']:.4f}); the last step was {step}"
        )
    elif selected is not None:
        lines.append(
            f"final model: step {step}, the last, also the best validation {selected['metric']} "
            f"({selected['value']:.4f})"
        )
    else:
        why = "" if not select_best else " (no validation evaluation to select on)"
        lines.append(f"final model: the last step, {step}{why}")
    for split, metrics in final.items():
        lines.append(f"final {split}: " + format_metrics(metrics))
    where = [
        ("workdir", workdir),
        (
            "checkpoints",
            os.path.join(workdir, "checkpoints")
            + (f" (latest step {checkpoint_step})" if checkpoint_step is not None else ""),
        ),
    ]
    if best_step is not None:
        where.append(("best", os.path.join(workdir, "best") + f" (step {best_step})"))
    where += [
        ("metrics", os.path.join(workdir, "metrics.jsonl") + ' (final lines: "final": true)'),
        ("tensorboard", "tensorboard --logdir " + os.path.join(workdir, "tensorboard")),
    ]
    width = max(len(name) for name, _ in where)
    lines += [f"  {name:<{width}}  {value}" for name, value in where]
    return "\n".join(lines)
