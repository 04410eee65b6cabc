"""`train_and_evaluate(config, workdir)`: the training loop every model shares.

It resumes from the workdir's latest checkpoint (model, optimiser, RNG and data position),
evaluates on validation during training and on validation and test at the end, writes
`metrics.jsonl` and TensorBoard, stops on a non-finite loss without overwriting the last good
checkpoint, and saves a checkpoint before exiting on SIGINT/SIGTERM. A resumed run first drops
the lines the interrupted run wrote to `metrics.jsonl` after that checkpoint; a workdir already
trained to the end, with its final metrics, is left as it is (`reevaluate` evaluates it again).
It ends with a summary of the run and where its files are.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import signal
import socket
import time

import jax
from absl import logging
import jax.numpy as jnp
import numpy as np

from jcaps.data import datasets
from jcaps.errors import ConfigError, UserError
from jcaps.data.batching import ExampleDataset, Shard
from jcaps.models import MODELS, build_model, get_family
from jcaps.train import config as config_lib
from jcaps.train import mesh as mesh_lib
from jcaps.train.checkpoints import Checkpoints, checkpoint_directory
from jcaps.train import metrics as metrics_lib
from jcaps.train.metrics import MetricWriter, evaluation_metrics
from jcaps.train.optim import make_optimizer
from jcaps.train.progress import Progress, format_metrics, run_summary
from jcaps.train.steps import TrainState, eval_step, model_inputs, train_step

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
DROPPED_ROWS_FILE = "dropped_rows.json"


class TrainingInterrupted(RuntimeError):
    """SIGINT/SIGTERM arrived; a checkpoint was saved. `exit_code` follows the shell's 128 + N."""

    def __init__(self, signum: int, step: int, directory: str):
        self.exit_code = 128 + signum
        super().__init__(f"interrupted by {signal.Signals(signum).name} at step {step}; checkpoint saved in {directory}")


class NonFiniteLoss(UserError, RuntimeError):
    pass


class IncompatibleWorkdir(UserError, ValueError):
    pass


class WorkdirInUse(UserError, RuntimeError):
    pass


# ---------------------------------------------------------------------------------------------
# Set-up: workdir, data, model, state.
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def exclusive_workdir(workdir: str, is_main: bool):
    """Holds WORKDIR/.lock for the length of a training run: a second run started on the same
    workdir would interleave its checkpoints and metrics with the first's, so it stops at once."""
    if not is_main:
        yield
        return
    with open(os.path.join(workdir, ".lock"), "a+", encoding="utf-8") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            raise WorkdirInUse(
                f"{workdir} is in use by a training run ({holder}); wait for it or stop it (it resumes "
                "from its last checkpoint), or pass another --workdir"
            ) from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
        lock.flush()
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def check_workdir(config, workdir: str) -> None:
    """Refuses to resume a workdir whose checkpoints were made with a shape-changing config."""
    path = os.path.join(workdir, "config.json")
    has_checkpoints = os.path.isdir(os.path.join(workdir, "checkpoints")) and any(
        name.isdigit() for name in os.listdir(os.path.join(workdir, "checkpoints"))
    )
    if os.path.isfile(path) and has_checkpoints:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
        differing = config_lib.incompatible_keys(saved, config)
        if differing:
            old, new = config_lib.flatten(saved), config_lib.flatten(json.loads(config.to_json()))
            changes = "; ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in differing)
            raise IncompatibleWorkdir(
                f"{workdir} holds checkpoints of a different config ({changes}). "
                "Use a new --workdir, or pass the saved values to resume."
            )


def create_train_state(config, model, family_optimizer, dummy_inputs: tuple, num_steps: int, mesh) -> TrainState:
    """Parameters are born replicated: `jit(init, out_shardings=...)`. `dummy_inputs`: the
    model's inputs for a tiny batch (`model_inputs(dataset.dummy_batch(), family)`)."""
    init_rng, state_rng = jax.random.split(jax.random.PRNGKey(config.train.seed))
    tx = family_optimizer(config, num_steps)

    def init(rng):
        params = model.init({"params": rng, "dropout": rng}, *dummy_inputs, train=False)["params"]
        return TrainState.create(apply_fn=model.apply, params=params, tx=tx, rng=state_rng)

    return jax.jit(init, out_shardings=mesh_lib.replicated(mesh))(init_rng)


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
    with open(os.path.join(workdir, DROPPED_ROWS_FILE), "w", encoding="utf-8") as f:
        json.dump(dropped, f, indent=1)


def parameter_count(params) -> int:
    return int(sum(np.prod(x.shape) for x in jax.tree.leaves(params)))


def compile_steps(config, family, dataset: ExampleDataset, mesh):
    """The jitted train and eval steps with their shardings (state replicated, batch split)."""
    replicated, sharded = mesh_lib.replicated(mesh), mesh_lib.batch_sharded(mesh)
    train = jax.jit(
        functools.partial(train_step, family=family, model_config=config.model),
        in_shardings=(replicated, sharded),
        out_shardings=(replicated, replicated),
        donate_argnums=0,
    )
    evaluate = jax.jit(
        functools.partial(eval_step, family=family, model_config=config.model, num_classes=dataset.num_classes),
        in_shardings=(replicated, sharded),
        out_shardings=replicated,
    )
    return train, evaluate


def evaluate_split(eval_fn, state, dataset: ExampleDataset, split: str, batch_size: int, mesh) -> dict:
    """Metrics of `state` on one split (sums accumulated on the device, divided on the host)."""
    totals = None
    for local in dataset.eval_batches(split, batch_size, shard=Shard(jax.process_index(), jax.process_count())):
        sums = eval_fn(state, mesh_lib.global_batch(local, mesh))
        totals = sums if totals is None else jax.tree.map(jnp.add, totals, sums)
    if totals is None:
        raise ValueError(f"the {split} split is empty")
    return evaluation_metrics(jax.device_get(totals))


# ---------------------------------------------------------------------------------------------
# The loop.
# ---------------------------------------------------------------------------------------------


class _SignalFlag:
    """Remembers the first SIGINT/SIGTERM so the loop can stop at a step boundary."""

    def __init__(self):
        self.signum = None
        self._previous = {}

    def __enter__(self):
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum, frame):
        del frame
        self.signum = self.signum or signum

    def __exit__(self, *exc):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def quiet_libraries() -> None:
    """orbax logs every save at INFO and TFDS draws progress bars: keep the console for jcaps."""
    logging.set_verbosity(logging.ERROR)
    import tensorflow_datasets as tfds

    tfds.disable_progress_bar()


def train_and_evaluate(config, workdir: str, reevaluate: bool = False) -> dict:
    """Trains `config` in `workdir` (resuming if it holds checkpoints); returns the final metrics.

    A workdir whose latest checkpoint is at the last step and whose `metrics.jsonl` has the final
    metrics is finished: it returns those metrics without writing anything, unless `reevaluate`,
    which evaluates the final model again and replaces the final lines. One run at a time in a
    workdir (`exclusive_workdir`)."""
    started = time.perf_counter()
    workdir = os.path.abspath(workdir)
    os.makedirs(workdir, exist_ok=True)
    with exclusive_workdir(workdir, jax.process_index() == 0):
        return _train_and_evaluate(config, workdir, reevaluate, started)


def _train_and_evaluate(config, workdir: str, reevaluate: bool = False, started: float | None = None) -> dict:
    config_lib.validate(config, MODELS)  # every key's type and range, before any data is read
    quiet_libraries()
    is_main = jax.process_index() == 0
    log = functools.partial(print, flush=True) if is_main else (lambda *a, **k: None)
    cache = config_lib.compilation_cache_dir(config.train.compilation_cache)
    if cache:
        jax.config.update("jax_compilation_cache_dir", cache)

    check_workdir(config, workdir)
    class_weight_power = config_lib.class_weight_power(config.train.class_weights)  # fails before the data loads

    # Data: the vocabulary (or standardisation) of a resumed run is the saved one, never rebuilt.
    # The checkpoint manager (which creates its folder) opens only once the data has loaded.
    has_metadata = datasets.has_metadata(checkpoint_directory(workdir))
    dataset = datasets.load_dataset(config.data, config.train.seed, checkpoint_directory(workdir))
    checkpoints = Checkpoints(workdir, keep=config.train.keep_checkpoints)
    steps_per_epoch = dataset.steps_per_epoch(config.train.batch_size)
    num_steps = config.train.num_steps or config.train.num_epochs * steps_per_epoch
    last_saved = checkpoints.latest_step()
    final_splits = [s for s in ("validation", "test") if s in dataset.splits and len(dataset.splits[s].source)]
    if max(num_steps, last_saved or 0) < 1:
        # Never report final metrics of an untrained model.
        raise ConfigError(
            f"nothing to train: train.num_steps={config.train.num_steps} and train.num_epochs="
            f"{config.train.num_epochs} ({steps_per_epoch} steps an epoch) give {num_steps} steps",
            hint="set train.num_epochs or train.num_steps to 1 or more",
        )
    if last_saved is not None and last_saved >= num_steps and not reevaluate:
        finals = metrics_lib.final_records(metrics_lib.read_metrics(workdir), last_saved)
        if finals and all(split in finals for split in final_splits):
            try:
                return _already_finished(config, workdir, checkpoints, last_saved, finals, log)
            finally:
                checkpoints.close()
    rewound = 0
    if is_main:
        with open(os.path.join(workdir, "config.json"), "w", encoding="utf-8") as f:
            f.write(config_lib.to_json(config))
        # What the interrupted run wrote after its last checkpoint (and the final lines, which
        # are written again at the end) goes: each (step, split) is logged once.
        rewound = metrics_lib.rewind_metrics(workdir, last_saved or 0)
    if not has_metadata and is_main:
        os.makedirs(checkpoints.directory, exist_ok=True)
        dataset.save_metadata(checkpoints.directory)

    family = get_family(config.model.name)
    model = build_model(config.model, dataset.model_input_size, dataset.num_classes, DTYPES[config.train.dtype])
    mesh = mesh_lib.data_mesh()
    batch_size = config.train.batch_size
    eval_batch_size = config.train.eval_batch_size or batch_size
    mesh_lib.check_batch_size(batch_size, mesh)
    mesh_lib.check_batch_size(eval_batch_size, mesh, "train.eval_batch_size")

    eval_every = config.train.eval_every_steps or steps_per_epoch
    checkpoint_every = config.train.checkpoint_every_steps or steps_per_epoch
    state = create_train_state(
        config, model, family.optimizer or default_optimizer, model_inputs(dataset.dummy_batch(), family), num_steps, mesh
    )
    train_fn, eval_fn = compile_steps(config, family, dataset, mesh)

    class_weights = None if class_weight_power is None else dataset.balanced_class_weights(class_weight_power)
    train_iterator = dataset.train_iterator(batch_size, config.train.seed, class_weights, config.data.length_grouping,
                                            shard=Shard(jax.process_index(), jax.process_count()))
    if last_saved is not None:
        state, data_state = checkpoints.restore(state)
        train_iterator.set_state(data_state)
        dropped = f"; dropped the {rewound} lines of metrics.jsonl written after it" if rewound else ""
        log(f"Resuming from step {int(state.step)} (checkpoint in {checkpoints.directory}{dropped}).")
        if reevaluate and int(state.step) >= num_steps:
            log(f"evaluating the model of step {int(state.step)} again (--reevaluate)")
    sizes = ", ".join(f"{name} {len(split.source)}" for name, split in dataset.splits.items())
    report_dropped_rows(dataset, workdir, log if is_main else None)
    log(
        f"{config.model.name}: {parameter_count(state.params):,} parameters; {dataset.inputs_description}; "
        f"{dataset.num_classes} classes; examples: {sizes}; {num_steps} steps of batch {batch_size} "
        f"({steps_per_epoch} per epoch) on {mesh.size} device(s)."
    )

    writer = MetricWriter(workdir, enabled=is_main, resumed_from=last_saved)
    profiler = _Profiler(config.train.profile_steps, os.path.join(workdir, "profile"), enabled=is_main)
    first_step = int(state.step)
    progress = Progress(config.train.progress, total=num_steps, initial=int(state.step), enabled=is_main)
    step = int(state.step)
    window: list[dict] = []
    best = checkpoints.best_record() if config.train.select_best else None
    has_validation = len(dataset.splits["validation"].source) > 0
    loop_started, first_step_seconds, evaluated = time.perf_counter(), None, False
    try:
        with _SignalFlag() as stop:
            while step < num_steps:
                if stop.signum is not None:
                    if last_saved != step:
                        checkpoints.save(step, state, train_iterator.get_state())
                    checkpoints.wait()
                    raise TrainingInterrupted(stop.signum, step, checkpoints.directory)
                profiler.before_step(step - first_step)
                state, metrics = train_fn(state, mesh_lib.global_batch(next(train_iterator), mesh))
                profiler.after_step(metrics)
                step += 1
                if first_step_seconds is None:
                    # Rates count from here: the first step's time is mostly compiling.
                    jax.block_until_ready(metrics)
                    first_step_seconds = time.perf_counter() - loop_started
                    progress.start(step)
                window.append(metrics)
                due_checkpoint = step % checkpoint_every == 0 or step == num_steps
                if step % config.train.log_every_steps == 0 or due_checkpoint or step == num_steps:
                    summary = _summarise_window(window, step, last_saved, checkpoints.directory)
                    window = []
                    writer.write(step, "train", summary)
                    progress.update(step, summary)
                if has_validation and (step % eval_every == 0 or step == num_steps):
                    # The first evaluation compiles the eval step: its time stays out of the ETA.
                    with progress.not_counted() if not evaluated else contextlib.nullcontext():
                        metrics = evaluate_split(eval_fn, state, dataset, "validation", eval_batch_size, mesh)
                    evaluated = True
                    writer.write(step, "validation", metrics)
                    progress.message(f"step {step}: validation " + format_metrics(metrics))
                    best = _keep_if_best(checkpoints, best, step, state, metrics, config.train)
                if due_checkpoint:
                    checkpoints.save(step, state, train_iterator.get_state())
                    last_saved = step
        checkpoints.wait()
        trained = (step - first_step, time.perf_counter() - loop_started, first_step_seconds)
        progress.close()

        selected = {}
        if best is not None and best["step"] != step:
            state = state.replace(params=checkpoints.restore_best_params(state.params))
            selected = {"selected_step": best["step"]}
        final = {}
        for split in final_splits:
            final[split] = evaluate_split(eval_fn, state, dataset, split, eval_batch_size, mesh)
            writer.write(step, split, final[split], final=True, **selected)
        log(run_summary(
            workdir=workdir, step=step, final=final, selected=best, select_best=config.train.select_best,
            trained=trained if trained[0] else None,
            wall_seconds=None if started is None else time.perf_counter() - started,
            checkpoint_step=checkpoints.latest_step(), best_step=best["step"] if best else None,
        ))
        return final
    finally:
        profiler.close()
        progress.close()
        writer.close()
        checkpoints.close()


def _already_finished(config, workdir: str, checkpoints: Checkpoints, step: int, finals: dict, log) -> dict:
    """Says that the workdir is trained to the end, with its final metrics; returns them."""
    final = {
        split: {k: v for k, v in record.items() if k not in ("step", "split", "final", "selected_step")}
        for split, record in finals.items()
    }
    best = checkpoints.best_record() if config.train.select_best else None
    log(f"already finished at step {step}: the final metrics are the \"final\": true lines of "
        f"{os.path.join(workdir, metrics_lib.METRICS_FILE)} (--reevaluate evaluates again; more "
        "train.num_epochs or train.num_steps trains on)")
    log(run_summary(
        workdir=workdir, step=step, final=final, selected=best, select_best=config.train.select_best,
        trained=None, wall_seconds=None, checkpoint_step=step, best_step=best["step"] if best else None,
    ))
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


def default_optimizer(config, num_steps):
    return make_optimizer(config.train, num_steps)


def _keep_if_best(checkpoints, best, step, state, metrics, train_config):
    """Saves the parameters when validation `select_metric` improves; returns the best record."""
    if not train_config.select_best:
        return None
    value = metrics[train_config.select_metric]
    if best is None or value > best["value"]:
        checkpoints.save_best(step, state.params, train_config.select_metric, value)
        return {"step": step, "metric": train_config.select_metric, "value": value}
    return best


def _summarise_window(window: list[dict], step: int, last_saved, directory: str) -> dict:
    """Means of the window's per-step metrics; stops the run at the first non-finite loss."""
    values = jax.device_get(window)
    losses = np.array([v["loss"] for v in values])
    bad = np.flatnonzero(~np.isfinite(losses))
    if bad.size:
        at = step - len(values) + 1 + int(bad[0])
        kept = f"the last good checkpoint is step {last_saved} in {directory}" if last_saved else "no checkpoint was saved"
        raise NonFiniteLoss(
            f"training loss became {losses[bad[0]]} at step {at}; stopping ({kept}). "
            "Try a lower train.learning_rate or train.grad_clip_norm."
        )
    return {key: float(np.mean([v[key] for v in values])) for key in values[0]}
