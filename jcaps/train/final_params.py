"""`WORKDIR/final_params.msgpack`: the parameters training reported as final, in one file that
loads without orbax.

A training that ends writes it after its final evaluation: the parameters it evaluated (those of
the best validation evaluation when the run selected them, else the last ones), which they are
("best" or "last", their step, the last checkpoint's step), the step directories of
`checkpoints/` and `best/` as they stood, the SHA-256 of the `checksums.json` of the step it
copies and the SHA-256 of the parameters' bytes. Loading a model for inference
(`jcaps.train.workdir.load_trained`) reads it while it still describes the workdir: the step
directories are those it was written beside (a training resumed since, or one writing the
workdir now, has changed them), the step it copies is this workdir's (a copy from another
workdir, even of the same config and step, names other checksums) and the bytes match their
checksum. Otherwise, or where it is missing (a training stopped early, a workdir trained before
the file existed), the checkpoints are read as before; a file of another workdir or one that
does not match its checksum is named in one warning line.

It is a copy: the checkpoints stay the record a training resumes from. It exists because
importing orbax takes a quarter of a second, a sixth of `jcaps predict`'s time to answer a text.
The format is msgpack (flax.serialization), a map {"format", "parameters", "selected_step",
"last_step", "saved_steps", "step_checksums", "sha256", "params"}, "params" holding the parameter tree serialised
by `flax.serialization.msgpack_serialize`.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable

import jax
import numpy as np
from flax import serialization

from jcaps.files import file_digest, replace_file

FINAL_PARAMS_FILE = "final_params.msgpack"
# 2: the record names the checksums of the step it copies (format 1 did not: such a file is
# passed over, and the checkpoints read).
FORMAT = 2
_STEP_FOLDERS = ("checkpoints", "best")


def saved_steps(workdir: str) -> tuple[tuple[str, ...], ...]:
    """The step directories of WORKDIR/checkpoints and WORKDIR/best, as they stand."""
    return tuple(
        tuple(sorted(name for name in os.listdir(os.path.join(workdir, folder)) if name.isdigit()))
        if os.path.isdir(os.path.join(workdir, folder))
        else ()
        for folder in _STEP_FOLDERS
    )


def step_folder(parameters: str, step: int) -> str:
    """The step directory, relative to the workdir, that holds the `parameters` ("best" or
    "last") of `step`."""
    return os.path.join("best" if parameters == "best" else "checkpoints", str(step))


def step_checksums(workdir: str, folder: str) -> str:
    """SHA-256 of WORKDIR/FOLDER/checksums.json, which names every file of that step by its own
    SHA-256 ("" where there is none): what ties a copy of a step's parameters, or their metrics,
    to this workdir's step."""
    try:
        return file_digest(os.path.join(workdir, folder, "checksums.json"))
    except OSError:
        return ""


def write(workdir: str, params, *, parameters: str, selected_step: int, last_step: int, warn: Callable) -> None:
    """Writes WORKDIR/final_params.msgpack atomically (a temporary file, fsynced, renamed). A
    write that fails (a full disk) costs nothing but speed: one `warn` line says so, and loading
    reads the checkpoints."""
    payload = serialization.msgpack_serialize(jax.device_get(params))
    record = {
        "format": FORMAT,
        "parameters": parameters,
        "selected_step": int(selected_step),
        "last_step": int(last_step),
        "saved_steps": [list(steps) for steps in saved_steps(workdir)],
        "step_checksums": step_checksums(workdir, step_folder(parameters, selected_step)),
        "sha256": hashlib.sha256(payload).hexdigest(),
        "params": payload,
    }
    target = os.path.join(workdir, FINAL_PARAMS_FILE)
    try:
        replace_file(target, serialization.msgpack_serialize(record))
    except OSError as error:
        warn(
            f"warning: cannot write {target} ({error.strerror or error}): evaluate, predict and interpret "
            "read the final parameters from the checkpoints instead, a little more slowly"
        )


def read(workdir: str, parameters: str, select_best: bool, warn: Callable) -> tuple | None:
    """(params as NumPy arrays, "best" or "last", their step, the last checkpoint's step) from
    WORKDIR/final_params.msgpack, for `parameters` ("final" or "last") of a workdir whose config
    says `select_best`; None where the file is missing, no longer describes the workdir, holds
    other parameters than those asked for, or holds values that are not finite (the checkpoints
    then say which step is at fault)."""
    path = os.path.join(workdir, FINAL_PARAMS_FILE)
    try:
        with open(path, "rb") as f:
            record = serialization.msgpack_restore(f.read())
        steps = saved_steps(workdir)  # after the read: a file replaced meanwhile describes them
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:  # msgpack's errors for bytes that do not decode are ValueErrors
        warn(f"warning: {path} cannot be read ({error}); reading the checkpoints instead")
        return None
    if isinstance(record, dict) and record.get("format") == 1:  # written before it named its step's checksums
        return None
    if not _well_formed(record):
        warn(f"warning: {path} is not a final parameters file of this jcaps; reading the checkpoints instead")
        return None
    if tuple(tuple(s) for s in record["saved_steps"]) != steps:
        return None
    if record["step_checksums"] != step_checksums(workdir, step_folder(record["parameters"], record["selected_step"])):
        warn(
            f"warning: {path} is not a copy of this workdir's step {record['selected_step']} (its checksums "
            "differ: a file from another workdir?); reading the checkpoints instead"
        )
        return None
    wants_last = parameters == "last" or not select_best
    if wants_last and record["selected_step"] != record["last_step"]:
        return None
    payload = record["params"]
    if hashlib.sha256(payload).hexdigest() != record["sha256"]:
        warn(f"warning: {path} does not match its checksum (it is damaged); reading the checkpoints instead")
        return None
    params = serialization.msgpack_restore(payload)
    if not all(np.isfinite(leaf).all() for leaf in jax.tree.leaves(params)):
        return None
    which = "last" if wants_last else record["parameters"]
    return params, which, record["selected_step"], record["last_step"]


def _well_formed(record) -> bool:
    """Whether `record` has every field of this format, each of its type."""
    types = {
        "parameters": str,
        "selected_step": int,
        "last_step": int,
        "saved_steps": list,
        "step_checksums": str,
        "sha256": str,
        "params": bytes,
    }
    return (
        isinstance(record, dict)
        and record.get("format") == FORMAT
        and all(isinstance(record.get(field), kind) for field, kind in types.items())
        and all(isinstance(steps, list) and all(isinstance(s, str) for s in steps) for steps in record["saved_steps"])
    )
