"""The checkpoint seam: orbax `CheckpointManager` steps plus the files a workdir needs to predict.

Layout of `WORKDIR/checkpoints/`: one orbax step directory per saved step holding `state`
(step, params, optimiser state, RNG) and `data` (the grain iterator position), and beside them
what encodes new inputs (`labels.json`, and `vocab.json` or the series standardisation; see
`jcaps.data.datasets`). `WORKDIR/best/` holds the parameters of the best validation
evaluation so far (`params`) with its `record` ({"step", "metric", "value"}).

Integrity. orbax commits a step atomically (a temporary directory renamed once complete), so a
killed save leaves no half-written step behind; but nothing in orbax checks what it reads back,
and a flipped byte in a data file loads as wrong weights. So every save is waited for and then
summed: `checksums.json` in the step directory holds the size and SHA-256 of every file the save
wrote (but orbax's commit markers, which hold no data), written atomically, and every restore
verifies it first (`verify_checksums`). A step without it, saved before jcaps wrote checksums or
killed between orbax's commit and the checksum write, is restored as orbax committed it.

Saves do not stop training: `save` and `save_best` copy the arrays into host memory of their own
(so that a train step donating the state's buffers cannot touch what is being written) and
return; one thread then writes them with orbax, waits for the commit and writes the checksums
while the next steps run (in a run of one process: with several, orbax's barriers are XLA
collectives, which must keep the main thread's order, so the save is written before `save`
returns). Only that thread calls orbax's save, on NumPy arrays, so no XLA work
runs beside the training's own. The next save, any read, and `wait()` (which training calls
before its final evaluation and before it stops on a signal) wait for it first, and raise its
`SaveFailed` there.

Faults, and what each costs:
- a damaged step (`DamagedCheckpoint`: a file missing, truncated or changed, or one orbax
  cannot read): resuming moves it aside (`checkpoints/60.damaged`, with a warning line) and
  restores the newest step that is intact; loading a model for inference refuses it;
- a save that fails (`SaveFailed`: a full disk, any OSError): the run stops with one line naming
  the workdir and its free space; the step was never committed, the previous one is intact;
- a reader beside a training (`read_only=True`: evaluate, predict, interpret) sees committed
  steps only, but one may be deleted while it is read (`keep` steps are kept, one best): such a
  step is skipped, not reported as damaged, and `jcaps.train.workdir` reads again.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import json
import logging
import os
import sys
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from jcaps.errors import RERUN_HINT, UserError, WriteFailed, failure_reason, free_space
from jcaps.files import file_digest, replacing
from jcaps.train.binding import BINDING_KEY
from jcaps.train.state import all_finite

CHECKSUMS_FILE = "checksums.json"
# orbax's commit markers: they hold no data, and orbax reads them only on object stores.
_UNSUMMED = (CHECKSUMS_FILE, "commit_success.txt")
_HASH = "sha256"
_DAMAGED_SUFFIX = ".damaged"
NOT_FINITE = "its parameters are not finite (NaN or infinity)"


class DamagedCheckpoint(UserError):
    """A saved step that does not read back as it was written. `path` names the damaged file
    (or the step directory, where orbax's error names none)."""

    def __init__(self, path: str, problem: str, hint: str | None = None):
        super().__init__(f"{path}: {problem}", hint=hint)
        self.path, self.problem = path, problem


class SaveFailed(WriteFailed):
    """A checkpoint could not be written (a full disk, a read-only or vanished filesystem)."""


def checkpoint_directory(workdir: str) -> str:
    """WORKDIR/checkpoints, where the manager keeps its steps (created when first opened)."""
    return os.path.join(os.path.abspath(workdir), "checkpoints")


# ---------------------------------------------------------------------------------------------
# Checksums of a step directory.
# ---------------------------------------------------------------------------------------------


def _summed_files(directory: str) -> list[str]:
    """The files under `directory` that the checksums cover, relative, sorted."""
    found = []
    for root, _, names in os.walk(directory):
        for name in names:
            if name not in _UNSUMMED:
                found.append(os.path.relpath(os.path.join(root, name), directory))
    return sorted(found)


def write_checksums(directory: str, binding: dict | None = None) -> None:
    """Writes `directory/checksums.json`: {"algorithm", "files": {relative path: [size, digest]}}
    of every file in the step directory, and the workdir's `binding` (`jcaps.train.binding`)
    where given, atomically (a temporary file, fsynced, renamed)."""
    files = {}
    for name in _summed_files(directory):
        path = os.path.join(directory, name)
        files[name] = [os.path.getsize(path), file_digest(path)]
    record: dict[str, Any] = {"algorithm": _HASH, "files": files}
    if binding is not None:
        record[BINDING_KEY] = binding
    with replacing(os.path.join(directory, CHECKSUMS_FILE)) as f:
        json.dump(record, f, indent=0)
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def verify_checksums(directory: str) -> bool:
    """Checks every file of the step `directory` against its `checksums.json`: True when all
    match, False when there is no such file (nothing to check against); raises
    `DamagedCheckpoint` naming the first file missing, of another size or other contents."""
    path = os.path.join(directory, CHECKSUMS_FILE)
    if not os.path.isfile(path):
        return False
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
        algorithm, files = saved["algorithm"], saved["files"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise DamagedCheckpoint(path, f"unreadable checksums ({error})") from error
    if algorithm not in hashlib.algorithms_available:
        raise DamagedCheckpoint(path, f"unknown checksum algorithm {algorithm!r}")
    for name, (size, digest) in sorted(files.items()):
        file = os.path.join(directory, name)
        if not os.path.isfile(file):
            raise DamagedCheckpoint(file, "missing")
        actual_size = os.path.getsize(file)
        if actual_size != size:
            raise DamagedCheckpoint(file, f"{actual_size} bytes where the save wrote {size}")
        try:
            with open(file, "rb") as f:
                actual = hashlib.file_digest(f, algorithm).hexdigest()
        except OSError as error:
            raise DamagedCheckpoint(file, f"unreadable ({error.strerror or error})") from error
        if actual != digest:
            raise DamagedCheckpoint(file, f"contents differ from the save ({algorithm} mismatch)")
    return True


def _is_io_failure(error: BaseException) -> bool:
    """An OSError, or tensorstore's report of one (a ValueError whose message starts with the
    status of a failed write)."""
    if isinstance(error, OSError):
        return True
    message = str(error)
    return isinstance(error, ValueError) and (
        "os_error_code" in message or message.startswith(("RESOURCE_EXHAUSTED", "PERMISSION_DENIED", "UNAVAILABLE"))
    )


def _quiet_abandoned_orbax_work() -> None:
    """After a save or a restore that failed (a full disk, a step deleted under a reader), orbax
    leaves asyncio tasks that nothing retrieves, and asyncio logs each one with its traceback as
    it is collected; tensorstore's callbacks still wake orbax's event loop once it has closed,
    each raising "Event loop is closed" where nothing can catch it, which Python prints as an
    unraisable exception. Both come around or after the one line that reports the failure (or
    the read made again), so both are dropped (idempotent); every other unraisable exception is
    printed as before."""
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    previous = sys.unraisablehook
    if getattr(previous, "drops_closed_event_loops", False):
        return

    def hook(unraisable) -> None:
        error, code = unraisable.exc_value, getattr(unraisable.object, "cr_code", None)
        closed_loop = isinstance(error, RuntimeError) and str(error) == "Event loop is closed"
        orbax_coroutine = code is not None and f"{os.sep}orbax{os.sep}" in code.co_filename  # a failed read's
        if not (closed_loop or orbax_coroutine):
            previous(unraisable)

    setattr(hook, "drops_closed_event_loops", True)  # noqa: B010 (a function's attribute, which mypy refuses)
    sys.unraisablehook = hook


class _OrbaxErrorsUnlogged:
    """orbax logs a failed write at ERROR from each of its threads before raising it; the caller
    reports the failure in one line, so the log records are held back from when a save starts
    (here) until it is finished (`restore`, on the thread that finishes it)."""

    def __init__(self):
        self._logger = logging.getLogger("absl")
        self._level = self._logger.level
        self._logger.setLevel(logging.CRITICAL)

    def restore(self) -> None:
        self._logger.setLevel(self._level)


@contextlib.contextmanager
def _orbax_errors_unlogged():
    """`_OrbaxErrorsUnlogged` for the length of a block."""
    quiet = _OrbaxErrorsUnlogged()
    try:
        yield
    finally:
        quiet.restore()


# ---------------------------------------------------------------------------------------------
# The workdir's checkpoints.
# ---------------------------------------------------------------------------------------------


class Checkpoints:
    """The steps of `WORKDIR/checkpoints` and the best parameters of `WORKDIR/best`, saved with
    checksums and verified when read (module docstring)."""

    def __init__(self, workdir: str, keep: int = 3, read_only: bool = False):
        """`read_only`: a reader's view (evaluate, predict, interpret), which creates and deletes
        nothing, beside a training that may be writing the workdir."""
        self.directory = checkpoint_directory(workdir)
        self.best_directory = os.path.join(os.path.abspath(workdir), "best")
        self._best = None
        self._read_only = read_only
        self._save_failed = False
        # The save in flight: written, committed and summed on this thread (`_write`).
        self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="jcaps-checkpoint")
        self._in_flight: concurrent.futures.Future | None = None
        self._is_primary = jax.process_index() == 0
        self._verified: set[str] = set()  # step directories verified by this process
        self._binding: dict | None = None  # what each step saved from now on is bound to (`bind`)
        _quiet_abandoned_orbax_work()
        self._manager = ocp.CheckpointManager(
            self.directory,
            item_names=("state", "data"),
            options=ocp.CheckpointManagerOptions(
                max_to_keep=keep,
                create=not read_only,
                read_only=read_only,
                enable_async_checkpointing=False,  # saves run on `self._writer`, not orbax's threads
            ),
        )

    def latest_step(self) -> int | None:
        self.wait()
        return self._manager.latest_step()

    def bind(self, binding: dict) -> None:
        """Records `binding` (`jcaps.train.binding.of_workdir`) in the checksums of every step
        saved from now on."""
        self._binding = binding

    def wait(self) -> None:
        """Waits for the save in flight to be committed and summed; raises its `SaveFailed`."""
        if self._in_flight is not None:
            in_flight, self._in_flight = self._in_flight, None
            in_flight.result()

    def save(self, step: int, state, data_state: dict | None) -> None:
        """Starts saving `step` (module docstring): once `wait()` returns it is committed and
        summed; a failure to write it is raised there as `SaveFailed` (the step is not
        committed)."""
        items = {"state": ocp.args.StandardSave(on_host(savable(state)))}
        if data_state is not None:
            items["data"] = ocp.args.JsonSave(data_state)
        self._save(self._manager, self.directory, step, ocp.args.Composite(**items))

    def restore(self, state, step: int | None = None, with_data: bool = True):
        """Restores into the structure (and shardings) of `state`; returns (state, data_state).
        Raises `DamagedCheckpoint` when the step does not read back as saved."""
        self.wait()
        step = self._manager.latest_step() if step is None else step
        target = jax.tree.map(ocp.utils.to_shape_dtype_struct, savable(state))
        items = {"state": ocp.args.StandardRestore(target)}
        if with_data:
            items["data"] = ocp.args.JsonRestore()
        restored = self._read(self._manager, self.directory, step, ocp.args.Composite(**items))
        saved = restored["state"]
        state = state.replace(
            step=saved["step"],
            params=saved["params"],
            opt_state=saved["opt_state"],
            rng=jax.random.wrap_key_data(saved["rng"]),
        )
        return state, (restored["data"] if with_data else None)

    def restore_newest_intact(self, state, warn) -> tuple:
        """`restore(state)` of the newest step that reads back as saved. Each newer, damaged
        step is moved aside (`checkpoints/STEP.damaged`, so that orbax no longer lists it) and
        named in one `warn` line. Raises `DamagedCheckpoint` when no step is intact, moving
        none."""
        return self._newest_intact(lambda s: self.restore(state, s), "resume from", warn, move_aside=True)[1]

    def restore_params(self, params, step: int | None = None):
        """The parameters of `step` (default latest) alone, restored into the structure and
        shardings of `params`: loading a model for inference reads no optimiser state, so it
        needs none built."""
        self.wait()
        step = self._manager.latest_step() if step is None else step
        target = {"params": jax.tree.map(ocp.utils.to_shape_dtype_struct, params)}
        restore_args = ocp.checkpoint_utils.construct_restore_args(target)
        args = ocp.args.PyTreeRestore(item=target, restore_args=restore_args, partial_restore=True)
        return self._read(self._manager, self.directory, step, ocp.args.Composite(state=args))["state"]["params"]

    def restore_newest_intact_params(self, params, warn) -> tuple[int, object]:
        """(step, parameters) of the newest step that reads back as saved and whose parameters are
        finite; each newer step, damaged or not finite, is named in one `warn` line and left where
        it is."""

        def finite_params(step: int):
            restored = self.restore_params(params, step)
            if not all_finite(restored):
                raise DamagedCheckpoint(os.path.join(self.directory, str(step)), NOT_FINITE)
            return restored

        return self._newest_intact(finite_params, "use", warn, move_aside=False)

    def read_state(self, step: int | None = None) -> dict:
        """The saved state of `step` (default latest) as stored, without a target structure."""
        self.wait()
        step = self._manager.latest_step() if step is None else step
        args = ocp.args.Composite(state=ocp.args.StandardRestore())
        return self._read(self._manager, self.directory, step, args)["state"]

    def close(self) -> None:
        """Waits for the save in flight (its failure was or will be reported by the error that
        ends the run, if any: this is called on the way out), then closes orbax's managers."""
        with contextlib.suppress(SaveFailed):
            self.wait()
        self._writer.shutdown()
        for manager in (self._manager, self._best):
            try:
                if manager is not None:
                    manager.close()
            except Exception:
                # orbax raises a failed save's error again when closed: `SaveFailed` reported it.
                if not self._save_failed:
                    raise

    # The best-on-validation parameters (model selection never looks at test).

    @property
    def _best_manager(self) -> ocp.CheckpointManager:
        if self._best is None:
            self._best = ocp.CheckpointManager(
                self.best_directory,
                item_names=("params", "record"),
                options=ocp.CheckpointManagerOptions(
                    max_to_keep=1,
                    create=not self._read_only,
                    read_only=self._read_only,
                    enable_async_checkpointing=False,
                    # Both managers may save the same step (the last one): in a multi-process
                    # run their barriers must not share names.
                    multiprocessing_options=ocp.options.MultiprocessingOptions(barrier_sync_key_prefix="best"),
                ),
            )
        return self._best

    def best_record(self) -> dict | None:
        """{"step", "metric", "value"} of the best validation evaluation saved, or None. Raises
        `DamagedCheckpoint` when the best step (parameters or record) does not read back as
        saved."""
        self.wait()
        if not os.path.isdir(self.best_directory):
            return None
        step = self._best_manager.latest_step()
        if step is None:
            return None
        args = ocp.args.Composite(record=ocp.args.JsonRestore())
        return self._read(self._best_manager, self.best_directory, step, args)["record"]

    def save_best(self, step: int, params, metric: str, value: float) -> None:
        record = {"step": int(step), "metric": metric, "value": float(value)}
        args = ocp.args.Composite(params=ocp.args.StandardSave(on_host(params)), record=ocp.args.JsonSave(record))
        self._save(self._best_manager, self.best_directory, step, args)

    def restore_best_params(self, params, step: int | None = None):
        """The best parameters (of `step`, that of a `best_record` read before; default the
        latest), restored into the structure and shardings of `params`."""
        self.wait()
        step = self._best_manager.latest_step() if step is None else step
        target = jax.tree.map(ocp.utils.to_shape_dtype_struct, params)
        args = ocp.args.Composite(params=ocp.args.StandardRestore(target))
        return self._read(self._best_manager, self.best_directory, step, args)["params"]

    def discard_best(self) -> str:
        """Moves the (damaged) best step aside; returns where it went."""
        self.wait()
        return self._move_aside(self._best_manager, self.best_directory, self._best_manager.latest_step())

    # Shared by both managers.

    def _save(self, manager: ocp.CheckpointManager, directory: str, step: int, args) -> None:
        """Writes `step` on `self._writer` (after the save in flight is finished); in a run of
        several processes, here: orbax's save ends in a barrier made of XLA collectives, which on
        another thread would interleave with the training step's own (the processes then abort
        in a collective mismatch)."""
        self.wait()
        quiet = _OrbaxErrorsUnlogged()  # from here until the save is finished, on the writer
        if jax.process_count() > 1:
            self._write(manager, directory, step, args, quiet)
            return
        self._in_flight = self._writer.submit(self._write, manager, directory, step, args, quiet)

    def _write(self, manager: ocp.CheckpointManager, directory: str, step: int, args, quiet) -> None:
        try:
            manager.save(step, args=args, force=True)
            if self._is_primary:
                write_checksums(os.path.join(directory, str(step)), self._binding)
        except (OSError, ValueError) as error:
            if not _is_io_failure(error):
                raise
            self._save_failed = True
            raise SaveFailed(
                f"cannot save the {'best parameters' if directory == self.best_directory else 'checkpoint'} of step "
                f"{step} in {directory}: {failure_reason(error)} ({free_space(directory)} free there)",
                hint=RERUN_HINT,
            ) from error
        finally:
            quiet.restore()

    def _read(self, manager: ocp.CheckpointManager, directory: str, step: int, args):
        """`manager.restore(step, args)` after verifying the step's checksums. An orbax error on
        a step without checksums is taken for damage; on a verified step it is not damage (the
        files are as saved) and is raised as it is."""
        step_directory = os.path.join(directory, str(step))
        verified = step_directory in self._verified or verify_checksums(step_directory)
        if verified:
            self._verified.add(step_directory)
            return manager.restore(step, args=args)
        try:
            with _orbax_errors_unlogged():
                return manager.restore(step, args=args)
        except (OSError, ValueError) as error:
            first_line = " ".join(str(error).split())[:300]
            raise DamagedCheckpoint(step_directory, f"orbax cannot read it ({first_line})") from error

    def _newest_intact(self, read, verb: str, warn, move_aside: bool) -> tuple[int, Any]:
        self.wait()
        damaged = []
        for step in sorted(self._manager.all_steps(), reverse=True):
            try:
                result = read(step)
            except DamagedCheckpoint as damage:
                if os.path.isdir(os.path.join(self.directory, str(step))):
                    damaged.append((step, damage))
                # else a training writing the workdir deleted the step (it keeps the newest few):
                # not damage, and an older one may still be read.
                continue
            for bad_step, problem in damaged:
                where = ""
                if move_aside:
                    where = f"; moved it to {self._move_aside(self._manager, self.directory, bad_step)}"
                warn(f"warning: checkpoint step {bad_step} is damaged ({problem}){where}; {verb} step {step}")
            return step, result
        found = "; ".join(f"step {step}: {damage}" for step, damage in damaged) or "none saved"
        raise DamagedCheckpoint(
            self.directory,
            f"no checkpoint is intact ({found})",
            hint=f"move {self.directory} aside, or pass another --workdir, to train from the start",
        )

    def _move_aside(self, manager: ocp.CheckpointManager, directory: str, step: int) -> str:
        """Renames step directory STEP to STEP.damaged (STEP.damaged.2, ... if taken): orbax lists
        only numeric names, so the step is gone from the manager, and nothing is deleted."""
        source = os.path.join(directory, str(step))
        target, suffix = source + _DAMAGED_SUFFIX, 1
        while os.path.exists(target):
            suffix += 1
            target = f"{source}{_DAMAGED_SUFFIX}.{suffix}"
        if self._is_primary:
            os.rename(source, target)
        manager.reload()
        self._verified.discard(source)
        return target


def keep_if_best(checkpoints: Checkpoints, best: dict | None, step: int, params, metrics: dict, train_config):
    """Model selection after a validation evaluation: saves `params` as the best when
    `metrics[train.select_metric]` beats `best` (ties keep the earlier step); returns the best
    record `{"step", "metric", "value"}`, or None without `train.select_best`."""
    if not train_config.select_best:
        return None
    value = metrics[train_config.select_metric]
    if best is None or value > best["value"]:
        checkpoints.save_best(step, params, train_config.select_metric, value)
        return {"step": step, "metric": train_config.select_metric, "value": value}
    return best


def on_host(tree):
    """Copies of the arrays of `tree` in host memory of their own (NumPy), not views of device
    buffers. The state is replicated (`jcaps.train.steps`), so this process's first replica of
    an array is all of it."""
    return jax.tree.map(lambda x: np.array(x.addressable_data(0) if isinstance(x, jax.Array) else x), tree)


def savable(state) -> dict:
    """The checkpointed tree of `state`: its typed key as the key's data (uint32[2] for the default
    threefry keys), which is what the legacy `jax.random.PRNGKey`s of older workdirs were, so those
    restore as the same key."""
    rng = jax.random.key_data(state.rng)
    return {"step": state.step, "params": state.params, "opt_state": state.opt_state, "rng": rng}
