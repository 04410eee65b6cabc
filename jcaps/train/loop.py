"""`train_and_evaluate(config, workdir)`: the training loop every model shares.

It resumes from the workdir's latest checkpoint (model, optimiser, RNG and data position),
evaluates on validation during training and on validation and test at the end, writes
`metrics.jsonl` and TensorBoard, stops on a non-finite training loss, validation metric or
parameters without overwriting the last good checkpoint (and before such a step can become the
best), and stops on SIGINT/SIGTERM: during the steps after saving a checkpoint, elsewhere at once
(`_Signals`); a failed write (a full disk) stops it with one line naming the path. A resumed run first drops
the lines the interrupted run wrote to `metrics.jsonl` after that checkpoint; a workdir already
trained to the end, with its final metrics, is left as it is (`reevaluate` evaluates it again).
It ends with a summary of the run and where its files are.

`_train_and_evaluate` reads top to bottom: open the run (data, checkpoints, step counts),
return at once if it is finished, start or resume the training state, train to the last step
(after each step: log, evaluate and keep the best parameters, save when due), then evaluate the
final model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from jcaps import folder_lock
from jcaps.data import datasets
from jcaps.data.batching import ExampleDataset
from jcaps.errors import RERUN_HINT, ConfigError, UserError, writing
from jcaps.files import refuse_linked_folder, replacing
from jcaps.train import binding, config_history, final_params
from jcaps.train import config as config_lib
from jcaps.train import mesh as mesh_lib
from jcaps.train import metrics as metrics_lib
from jcaps.train.checkpoints import Checkpoints, DamagedCheckpoint, checkpoint_directory, keep_if_best
from jcaps.train.evaluation import evaluate_split
from jcaps.train.families import MODELS, get_family
from jcaps.train.feeding import DevicePrefetch, DispatchWindow, batches_ahead
from jcaps.train.metrics import MetricWriter
from jcaps.train.progress import (
    CompileClock,
    Progress,
    TrainedSteps,
    duration,
    format_metrics,
    quiet_libraries,
    run_summary,
)
from jcaps.train.state import all_finite, create_train_state, dummy_inputs, model_for, parameter_count
from jcaps.train.steps import TrainState, compile_steps

DROPPED_ROWS_FILE = "dropped_rows.json"


class TrainingInterrupted(RuntimeError):
    """SIGINT/SIGTERM arrived: `where` says at which step, and what was saved. `exit_code`
    follows the shell's 128 + N (130 for Ctrl-C). `wall_seconds`, once `train_and_evaluate` sets
    it, joins the message in the form of the end summary's ("wall time H:MM:SS"), so the wall
    time of a run stopped and resumed adds up."""

    def __init__(self, signum: int, where: str):
        self.exit_code = 128 + signum
        self.wall_seconds: float | None = None
        super().__init__(f"interrupted by {signal.Signals(signum).name} {where}")

    def __str__(self) -> str:
        wall = "" if self.wall_seconds is None else f"; wall time {duration(self.wall_seconds)}"
        return super().__str__() + wall


class NonFiniteLoss(UserError, RuntimeError):
    pass


class IncompatibleWorkdir(UserError, ValueError):
    pass


# ---------------------------------------------------------------------------------------------
# The workdir: one run at a time, a config that matches its checkpoints.
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def exclusive_workdir(workdir: str, is_main: bool):
    """Holds WORKDIR/.lock for the length of a training run: a second run started on the same
    workdir would interleave its checkpoints and metrics with the first's, so it stops at once."""
    if not is_main:
        yield
        return
    with folder_lock.exclusive(
        workdir,
        called="the workdir",
        run="a training run",
        advice="wait for it or stop it (it resumes from its last checkpoint), or pass another --workdir",
        hint=RERUN_HINT,
    ):
        yield


def check_workdir(config, workdir: str) -> None:
    """Refuses to resume a workdir whose checkpoints were made with a shape-changing config, or
    whose folders training writes into are links (`jcaps.files`)."""
    for folder in ("checkpoints", "best", "tensorboard"):
        refuse_linked_folder(os.path.join(workdir, folder))
    path = os.path.join(workdir, "config.json")
    has_checkpoints = os.path.isdir(os.path.join(workdir, "checkpoints")) and any(
        name.isdigit() for name in os.listdir(os.path.join(workdir, "checkpoints"))
    )
    if os.path.isfile(path) and has_checkpoints:
        try:
            with open(path, encoding="utf-8") as f:
                saved = config_history.upgraded(json.load(f), source=path)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise UserError(
                f"{path} cannot be read: {error}",
                hint="the workdir is damaged: put back its config.json, or train a new --workdir",
            ) from None
        differing = config_lib.incompatible_keys(saved, config)
        if differing:
            old, new = config_lib.flatten(saved), config_lib.flatten(json.loads(config.to_json()))
            changes = "; ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in differing)
            raise IncompatibleWorkdir(
                f"{workdir} holds checkpoints of a different config ({changes}). "
                "Use a new --workdir, or pass the saved values to resume."
            )


def report_dropped_rows(dataset: ExampleDataset, workdir: str, log) -> None:
    """Says which files lost bad rows to `data.drop_bad_rows`, and keeps it in
    WORKDIR/dropped_rows.json (`{file: {"count", "first": [problems]}}`)."""
    dropped = {
        split.dropped["file"]: {"count": split.dropped["count"], "first": split.dropped["first"]}
        for split in dataset.splits.values()
        if split.dropped
    }
    if not dropped or log is None:
        return
    for path, record in dropped.items():
        log(f"data.drop_bad_rows: dropped {record['count']} bad rows of {path} (first: {record['first'][0]})")
    path = os.path.join(workdir, DROPPED_ROWS_FILE)
    with writing("the list of dropped rows", path), replacing(path) as f:
        json.dump(dropped, f, indent=1)


# ---------------------------------------------------------------------------------------------
# The run: what it works with, and where it stands.
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class _Run:
    """What a run works with from its first step to its last."""

    config: Any
    workdir: str
    dataset: ExampleDataset
    checkpoints: Checkpoints
    num_steps: int
    steps_per_epoch: int
    final_splits: list[str]  # the non-empty ones of validation and test
    is_main: bool  # process 0, the one that writes files and logs
    log: Callable[..., None]
    signals: _Signals

    def warn(self, message: str) -> None:
        """One warning line, on stderr (process 0 only)."""
        if self.is_main:
            print(message, file=sys.stderr, flush=True)

    @property
    def batch_size(self) -> int:
        return self.config.train.batch_size

    @property
    def eval_batch_size(self) -> int:
        return self.config.train.eval_batch_size or self.config.train.batch_size


@dataclasses.dataclass
class _Compiled:
    """The jitted train and eval steps, and the mesh they shard over."""

    mesh: Any
    train_fn: Callable
    eval_fn: Callable


@dataclasses.dataclass
class _Position:
    """Where training stands: the state after `step` updates, the data iterator that feeds the
    next one, the step of the last checkpoint saved, the best validation record so far
    (`train.select_best`, see `keep_if_best`) and the train metrics of the steps not yet logged."""

    state: TrainState
    train_iterator: Any
    step: int
    last_saved: int | None
    best: dict | None
    window: list[dict] = dataclasses.field(default_factory=list)


def _prepare_process(config) -> None:
    """Before any data is read: every config key's type and range, quiet libraries, the
    persistent compilation cache."""
    config_lib.validate(config, MODELS)
    quiet_libraries()
    cache = config_lib.compilation_cache_dir(config.train.compilation_cache)
    if cache:
        jax.config.update("jax_compilation_cache_dir", cache)


def _open_run(config, workdir: str, is_main: bool, log, signals: _Signals) -> _Run:
    """The data and the checkpoints of the run. The vocabulary (or standardisation) of a resumed
    run is the saved one, never rebuilt. The checkpoint manager (which creates its folder) opens
    only once the data has loaded, and a new run's data metadata is saved there only once there
    is something to train."""
    has_metadata = datasets.has_metadata(checkpoint_directory(workdir))
    if has_metadata:  # a resumed run reads them: they must be those its steps were trained with
        binding.check(workdir, config)
    dataset = datasets.load_dataset(config.data, config.train.seed, checkpoint_directory(workdir))
    checkpoints = Checkpoints(workdir, keep=config.train.keep_checkpoints)
    steps_per_epoch = dataset.steps_per_epoch(config.train.batch_size)
    num_steps = config.train.num_steps or config.train.num_epochs * steps_per_epoch
    if max(num_steps, checkpoints.latest_step() or 0) < 1:
        # Never report final metrics of an untrained model.
        raise ConfigError(
            f"nothing to train: train.num_steps={config.train.num_steps} and train.num_epochs="
            f"{config.train.num_epochs} ({steps_per_epoch} steps an epoch) give {num_steps} steps",
            hint="set train.num_epochs or train.num_steps to 1 or more",
        )
    if not has_metadata and is_main:
        with writing("the vocabulary and labels of the data in", checkpoints.directory):
            os.makedirs(checkpoints.directory, exist_ok=True)
            dataset.save_metadata(checkpoints.directory)
    if is_main:
        checkpoints.bind(binding.of_workdir(checkpoints.directory, config))
    final_splits: list[str] = [
        s for s in ("validation", "test") if s in dataset.splits and len(dataset.splits[s].source)
    ]
    return _Run(config, workdir, dataset, checkpoints, num_steps, steps_per_epoch, final_splits, is_main, log, signals)


def _finished_records(run: _Run, reevaluate: bool) -> dict | None:
    """The final `metrics.jsonl` records (one per final split) of a run trained to its last step,
    or None when there is training or evaluating to do."""
    last_saved = run.checkpoints.latest_step()
    if last_saved is None or last_saved < run.num_steps or reevaluate:
        return None
    finals = metrics_lib.final_records(metrics_lib.read_metrics(run.workdir), last_saved)
    if not finals or not all(split in finals for split in run.final_splits):
        return None
    for record in finals.values():  # lines written before they named their step are taken as they are
        scored = record.get("scored")
        if isinstance(scored, str) and final_params.step_checksums(run.workdir, scored) != record.get("step_checksums"):
            return None  # lines of another workdir's step (or of a step since damaged): evaluate again
    return finals


def _write_run_config(run: _Run) -> None:
    """Writes WORKDIR/config.json."""
    if run.is_main:
        path = os.path.join(run.workdir, "config.json")
        with writing("the config", path), replacing(path) as f:
            f.write(config_lib.to_json(run.config))


def _compile(run: _Run, compiler_options) -> _Compiled:
    mesh = mesh_lib.data_mesh()
    mesh_lib.check_batch_size(run.batch_size, mesh)
    mesh_lib.check_batch_size(run.eval_batch_size, mesh, "train.eval_batch_size")
    family = get_family(run.config.model.name)
    train_fn, eval_fn = compile_steps(
        run.config, family, run.dataset.num_classes, mesh, compiler_options=compiler_options
    )
    return _Compiled(mesh, train_fn, eval_fn)


def _start_or_resume(run: _Run, mesh, class_weight_power, reevaluate: bool) -> _Position:
    """The initial state and data order of `train.seed`, or those of the newest checkpoint that
    is intact (newer, damaged ones are moved aside with a warning). Then drops what an
    interrupted run wrote to `metrics.jsonl` after that checkpoint (and the final lines, which
    are written again at the end), so that each (step, split) is logged once."""
    train = run.config.train
    model = model_for(run.config, run.dataset)
    state = create_train_state(run.config, model, dummy_inputs(run.config, run.dataset), run.num_steps, mesh)
    class_weights = None if class_weight_power is None else run.dataset.balanced_class_weights(class_weight_power)
    train_iterator = run.dataset.train_iterator(
        run.batch_size, train.seed, class_weights, run.config.data.length_grouping, shard=mesh_lib.process_shard()
    )
    last_saved = None
    if run.checkpoints.latest_step() is not None:
        state, data_state = run.checkpoints.restore_newest_intact(state, run.warn)
        train_iterator.set_state(data_state)
        last_saved = int(state.step)
    train_iterator = DevicePrefetch(train_iterator, mesh, batches_ahead(mesh))
    rewound = metrics_lib.rewind_metrics(run.workdir, last_saved or 0) if run.is_main else 0
    if last_saved is not None:
        dropped = f"; dropped the {rewound} lines of metrics.jsonl written after it" if rewound else ""
        run.log(f"Resuming from step {last_saved} (checkpoint in {run.checkpoints.directory}{dropped}).")
        if reevaluate and last_saved >= run.num_steps:
            run.log(f"evaluating the model of step {last_saved} again (--reevaluate)")
    best = _best_record(run, restarts_at=last_saved or 0) if train.select_best else None
    return _Position(state, train_iterator, int(state.step), last_saved, best)


def _best_record(run: _Run, restarts_at: int) -> dict | None:
    """The best validation record so far; a damaged best step is moved aside with a warning, and
    model selection starts again from `restarts_at`. A run with no step left to train cannot
    select its model again: there a damaged best step is one line (nothing moved)."""
    try:
        return run.checkpoints.best_record()
    except DamagedCheckpoint as damage:
        if restarts_at >= run.num_steps:
            raise DamagedCheckpoint(
                damage.path,
                f"{damage.problem}: the run is trained to its last step, so the model it selected on validation "
                "cannot be selected again",
                hint="put back the workdir's best/, or use its last parameters: jcaps evaluate --parameters last",
            ) from damage
        aside = run.checkpoints.discard_best()
        run.warn(
            f"warning: the best parameters are damaged ({damage}); moved them to {aside}; model "
            f"selection starts again from step {restarts_at}"
        )
        return None


def _log_start(run: _Run, position: _Position, mesh) -> None:
    """What is trained on what, once, before the first step."""
    dataset = run.dataset
    sizes = ", ".join(f"{name} {len(split.source)}" for name, split in dataset.splits.items())
    report_dropped_rows(dataset, run.workdir, run.log if run.is_main else None)
    run.log(
        f"{run.config.model.name}: {parameter_count(position.state.params):,} parameters; "
        f"{dataset.inputs_description}; {dataset.num_classes} classes; examples: {sizes}; {run.num_steps} steps of "
        f"batch {run.batch_size} ({run.steps_per_epoch} per epoch) on {mesh.size} device(s)."
    )
    run.log(class_balance(dataset, run.config.train.class_weights))


def class_balance(dataset: ExampleDataset, class_weights: str) -> str:
    """One line: how skewed the classes (or labels) of the train split are, and the class
    weighting of the loss (`train.class_weights`), so that a run on new data says which choice
    it made for a balanced or a skewed test set."""
    what, counts = ("labels" if dataset.multi_label else "classes"), dataset.train_counts()
    present = counts[counts > 0]
    skew = f"the largest has {int(counts.max()):,} examples, the smallest {int(present.min()):,}"
    skew += f" ({counts.max() / present.min():.1f} times fewer)" if len(present) > 1 else ""
    if len(present) < len(counts):
        skew += f", {len(counts) - len(present)} have none"
    power = config_lib.class_weight_power(class_weights)
    if dataset.multi_label:
        weighting = "no class weights (multi-label)"
    elif power is None:
        weighting = (
            "no class weights (train.class_weights=none): a larger class weighs more in the loss, as in a test "
            "set skewed as train is"
        )
    else:
        weights = dataset.balanced_class_weights(power)[counts > 0]
        weighting = (
            f"class weights {class_weights} (train.class_weights), {weights.min():.2f} to {weights.max():.2f}: "
            "the classes weigh more alike in the loss, as in a balanced test set"
        )
    return f"{what} of train: {skew}; {weighting}."


# ---------------------------------------------------------------------------------------------
# The loop.
# ---------------------------------------------------------------------------------------------


class _Signals:
    """SIGINT and SIGTERM for the length of a run. Outside the training steps (reading data,
    compiling, resuming, the final evaluation) one stops the run at once, raising
    `TrainingInterrupted` where the program is: nothing it leaves is trusted by a rerun
    (checkpoints are committed whole, final metrics are written again). During the steps
    (`deferred`) the first is remembered, so that the loop stops at a step boundary and saves."""

    def __init__(self):
        self.signum = None
        self._deferring = False
        self._previous = {}

    def __enter__(self):
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum, frame):
        del frame
        if not self._deferring:
            raise TrainingInterrupted(
                signum,
                "outside the training steps; the checkpoints saved are intact: the "
                "same command goes on from the last one",
            )
        self.signum = self.signum or signum

    @contextlib.contextmanager
    def deferred(self):
        self._deferring = True
        try:
            yield self
        finally:
            self._deferring = False

    def __exit__(self, *exc):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def train_and_evaluate(
    config, workdir: str, reevaluate: bool = False, *, compiler_options: dict[str, Any] | None = None
) -> dict:
    """Trains `config` in `workdir` (resuming if it holds checkpoints); returns the final metrics.

    A workdir whose latest checkpoint is at the last step and whose `metrics.jsonl` has the final
    metrics is finished: it returns those metrics without writing anything, unless `reevaluate`,
    which evaluates the final model again and replaces the final lines. One run at a time in a
    workdir (`exclusive_workdir`). `compiler_options` are XLA's, for the train and eval steps
    (`compile_steps`): they change how fast the steps compile and run, not what they compute."""
    started = time.perf_counter()
    workdir = os.path.abspath(workdir)
    is_main = jax.process_index() == 0
    created = not os.path.exists(workdir)
    with writing("the workdir", workdir):
        os.makedirs(workdir, exist_ok=True)
    try:
        with exclusive_workdir(workdir, is_main), _Signals() as signals:
            try:
                return _train_and_evaluate(config, workdir, reevaluate, started, signals, compiler_options)
            except TrainingInterrupted as stopped:
                stopped.wall_seconds = time.perf_counter() - started
                raise
    except BaseException:
        if created and is_main:
            _remove_if_only_the_lock(workdir)
        raise


def _remove_if_only_the_lock(workdir: str) -> None:
    """Removes a workdir this run created when it holds nothing but the lock: a run that stopped
    before writing anything (a wrong data directory, say) leaves no folder behind."""
    with contextlib.suppress(OSError):
        if set(os.listdir(workdir)) <= {".lock"}:
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(workdir, ".lock"))
            os.rmdir(workdir)


def _train_and_evaluate(
    config, workdir: str, reevaluate: bool, started: float, signals: _Signals, compiler_options
) -> dict:
    _prepare_process(config)
    is_main = jax.process_index() == 0
    log = functools.partial(print, flush=True) if is_main else (lambda *a, **k: None)
    check_workdir(config, workdir)
    class_weight_power = config_lib.class_weight_power(config.train.class_weights)  # fails before the data loads
    run = _open_run(config, workdir, is_main, log, signals)
    try:
        finished = _finished_records(run, reevaluate)
        if finished is not None:
            return _already_finished(run, finished)
        _write_run_config(run)
        compiled = _compile(run, compiler_options)
        position = _start_or_resume(run, compiled.mesh, class_weight_power, reevaluate)
        _log_start(run, position, compiled.mesh)
        return _train_then_evaluate(run, compiled, position, started)
    finally:
        run.checkpoints.close()


def _train_then_evaluate(run: _Run, compiled: _Compiled, position: _Position, started: float | None) -> dict:
    """Trains from `position` to the last step, then evaluates the final model on the final
    splits, logs the run's summary and returns the final metrics."""
    train = run.config.train
    writer = MetricWriter(run.workdir, enabled=run.is_main, resumed_from=position.last_saved)
    profiler = _Profiler(train.profile_steps, os.path.join(run.workdir, "profile"), enabled=run.is_main)
    progress = Progress(train.progress, total=run.num_steps, initial=position.step, enabled=run.is_main)
    try:
        trained = _train(run, compiled, position, writer, profiler, progress)
        progress.close()
        final = _evaluate_final(run, compiled, position, writer)
        run.log(
            run_summary(
                workdir=run.workdir,
                step=position.step,
                final=final,
                selected=position.best,
                select_best=train.select_best,
                trained=trained if trained.steps else None,
                wall_seconds=None if started is None else time.perf_counter() - started,
                checkpoint_step=run.checkpoints.latest_step(),
                best_step=position.best["step"] if position.best else None,
            )
        )
        return final
    finally:
        profiler.close()
        progress.close()
        writer.close()


def _train(run: _Run, compiled: _Compiled, position: _Position, writer, profiler, progress) -> TrainedSteps:
    """Steps `position` to the last step. After each step: the mean train metrics of the steps
    since the last log line when due, an evaluation on validation when due, a checkpoint when
    due. A SIGINT/SIGTERM saves a checkpoint and raises `TrainingInterrupted`."""
    train = run.config.train
    eval_every = train.eval_every_steps or run.steps_per_epoch
    checkpoint_every = train.checkpoint_every_steps or run.steps_per_epoch
    has_validation = len(run.dataset.splits["validation"].source) > 0
    first_step, loop_started, first_step_seconds, evaluated = position.step, time.perf_counter(), None, False
    compile_clock, compiled_by_first_step = CompileClock(), 0.0
    dispatch = DispatchWindow()
    with run.signals.deferred() as stop:
        while position.step < run.num_steps:
            profiler.before_step(position.step - first_step)
            metrics = _train_step(compiled, position)
            dispatch.dispatched(metrics)
            profiler.after_step(metrics)
            if first_step_seconds is None:
                # Rates count from here: the first step's time is mostly compiling.
                jax.block_until_ready(metrics)
                first_step_seconds = time.perf_counter() - loop_started
                compiled_by_first_step = compile_clock.seconds()
                progress.start(position.step)
            position.window.append(metrics)
            step, last = position.step, position.step == run.num_steps
            due_checkpoint = step % checkpoint_every == 0 or last
            if step % train.log_every_steps == 0 or due_checkpoint:
                _log_window(run, position, writer, progress)
            if has_validation and (step % eval_every == 0 or last):
                _evaluate_and_keep_best(run, compiled, position, writer, progress, compiles=not evaluated)
                evaluated = True
            if due_checkpoint:
                _save(run, position)
            if stop.signum is not None:  # the last step's too: the final evaluation is not begun
                _save_and_stop(run, position, stop.signum)
        run.checkpoints.wait()  # the last save is committed (or its failure raised) before anything is final
    return TrainedSteps(
        steps=position.step - first_step,
        seconds=time.perf_counter() - loop_started,
        first_seconds=first_step_seconds,
        later_compile_seconds=compile_clock.seconds() - compiled_by_first_step,
    )


def _train_step(compiled: _Compiled, position: _Position) -> dict:
    """One update of `position` on the next batch; returns its metrics (on the device)."""
    position.state, metrics = compiled.train_fn(position.state, next(position.train_iterator))
    position.step += 1
    return metrics


def _log_window(run: _Run, position: _Position, writer, progress) -> None:
    """Logs the mean train metrics of the steps since the last log line (and stops the run at a
    non-finite loss)."""
    summary = _summarise_window(position.window, position.step, position.last_saved, run.checkpoints.directory)
    position.window = []
    writer.write(position.step, "train", summary)
    progress.update(position.step, summary)


def _evaluate_and_keep_best(
    run: _Run, compiled: _Compiled, position: _Position, writer, progress, compiles: bool
) -> None:
    """Evaluates on validation, logs the metrics, and keeps the parameters if they are the best
    so far. `compiles`: the first evaluation compiles the eval step, so its time stays out of
    the ETA."""
    with progress.not_counted() if compiles else contextlib.nullcontext():
        metrics = evaluate_split(
            compiled.eval_fn, position.state, run.dataset, "validation", run.eval_batch_size, compiled.mesh
        )
    writer.write(position.step, "validation", metrics)
    progress.message(f"step {position.step}: validation " + format_metrics(metrics))
    _stop_unless_finite(run, position, metrics)
    position.best = keep_if_best(
        run.checkpoints, position.best, position.step, position.state.params, metrics, run.config.train
    )


def _stop_unless_finite(run: _Run, position: _Position, metrics: dict) -> None:
    """Stops the run (`NonFiniteLoss`) at a validation evaluation whose metrics or parameters are
    not finite, before model selection: NaN scores all take one class, and their accuracy can
    beat a real model's, so such a step must never become the best."""
    not_finite = [f"{key} {value}" for key, value in metrics.items() if not math.isfinite(value)]
    if not not_finite and all_finite(position.state.params):
        return
    what = f"validation {', '.join(not_finite)}" if not_finite else "non-finite parameters"
    raise NonFiniteLoss(
        f"{what} at step {position.step}; stopping before model selection "
        f"({_last_good(position.last_saved, run.checkpoints.directory)}). {_NON_FINITE_HINT}"
    )


def _save(run: _Run, position: _Position) -> None:
    run.checkpoints.save(position.step, position.state, position.train_iterator.get_state())
    position.last_saved = position.step


def _save_and_stop(run: _Run, position: _Position, signum: int) -> None:
    """Saves a checkpoint of the current step (unless it is the last one saved), waits until it is
    committed, and raises `TrainingInterrupted`."""
    if position.last_saved != position.step:
        _save(run, position)
    run.checkpoints.wait()
    raise TrainingInterrupted(signum, f"at step {position.step}; checkpoint saved in {run.checkpoints.directory}")


def _evaluate_final(run: _Run, compiled: _Compiled, position: _Position, writer) -> dict:
    """Metrics of the final model on each final split, written as the "final" lines, and its
    parameters in `final_params.msgpack` (`jcaps.train.final_params`). The final model has the
    best validation parameters when the run selected them (`train.select_best`), else the last
    ones."""
    state, selected = position.state, {}
    if position.best is not None and position.best["step"] != position.step:
        state = state.replace(params=run.checkpoints.restore_best_params(state.params))
        selected = {"selected_step": position.best["step"]}
    parameters = "last" if position.best is None else "best"
    selected_step = position.step if position.best is None else position.best["step"]
    # The step the final lines score, named by its checksums: lines copied from another workdir
    # are not taken for this one's (`_finished_records`).
    folder = final_params.step_folder(parameters, selected_step)
    scored = {"scored": folder, "step_checksums": final_params.step_checksums(run.workdir, folder)}
    final = {}
    for split in run.final_splits:
        final[split] = evaluate_split(compiled.eval_fn, state, run.dataset, split, run.eval_batch_size, compiled.mesh)
        writer.write(position.step, split, final[split], final=True, **selected, **scored)
    if run.is_main:
        final_params.write(
            run.workdir,
            state.params,
            parameters=parameters,
            selected_step=selected_step,
            last_step=position.step,  # saved before its final evaluation
            warn=run.warn,
        )
    return final


def _already_finished(run: _Run, finished: dict) -> dict:
    """Says that the workdir is trained to the end, with its final metrics; returns them."""
    final = {
        split: {
            k: v
            for k, v in record.items()
            if k not in ("step", "split", "final", "selected_step", "scored", "step_checksums")
        }
        for split, record in finished.items()
    }
    train, step = run.config.train, run.checkpoints.latest_step()
    assert step is not None  # `_finished_records` found the run's last checkpoint
    best = None
    if train.select_best:
        try:
            best = run.checkpoints.best_record()
        except DamagedCheckpoint as damage:
            run.warn(
                f"warning: the best parameters are damaged ({damage}): evaluate, predict and interpret "
                "refuse them (--parameters last uses the last checkpoint)"
            )
    run.log(
        f'already finished at step {step}: the final metrics are the "final": true lines of '
        f"{os.path.join(run.workdir, metrics_lib.METRICS_FILE)} (--reevaluate evaluates again; more "
        "train.num_epochs or train.num_steps trains on)"
    )
    run.log(
        run_summary(
            workdir=run.workdir,
            step=step,
            final=final,
            selected=best,
            select_best=train.select_best,
            trained=None,
            wall_seconds=None,
            checkpoint_step=step,
            best_step=best["step"] if best else None,
        )
    )
    return final


class _Profiler:
    """A JAX profiler trace of `num_steps` training steps, started after the first step (so the
    trace holds steady-state steps, not the compile) and written to `directory`."""

    def __init__(self, num_steps: int, directory: str, enabled: bool):
        self.remaining = num_steps if enabled else 0
        self.directory = directory
        self.running = False

    def before_step(self, steps_done_in_run: int) -> None:
        if self.remaining and not self.running and steps_done_in_run >= 1:
            jax.profiler.start_trace(self.directory)
            self.running = True

    def after_step(self, metrics) -> None:
        if self.running:
            self.remaining -= 1
            if not self.remaining:
                jax.block_until_ready(metrics)
                jax.profiler.stop_trace()
                self.running = False

    def close(self) -> None:
        if self.running:
            jax.profiler.stop_trace()
            self.running = False


_NON_FINITE_HINT = "Try a lower train.learning_rate or train.grad_clip_norm."


def _last_good(last_saved: int | None, directory: str) -> str:
    return f"the last good checkpoint is step {last_saved} in {directory}" if last_saved else "no checkpoint was saved"


def _summarise_window(window: list[dict], step: int, last_saved, directory: str) -> dict:
    """Means of the window's per-step metrics; stops the run at the first non-finite loss."""
    values = jax.device_get(window)
    losses = np.array([v["loss"] for v in values])
    bad = np.flatnonzero(~np.isfinite(losses))
    if bad.size:
        at = step - len(values) + 1 + int(bad[0])
        raise NonFiniteLoss(
            f"training loss became {losses[bad[0]]} at step {at}; stopping ({_last_good(last_saved, directory)}). "
            f"{_NON_FINITE_HINT}"
        )
    return {key: float(np.mean([v[key] for v in values])) for key in values[0]}
