"""What ties a workdir's other files to its parameters, so that loading serves no mix of two.

Parameters alone do not make a model: `config.json` says how to build it, and the files of
`checkpoints/` that encode inputs and name outputs (the vocabulary, the labels, a series
dataset's statistics and width) say what its inputs and outputs mean. A renamed token or two
swapped label names would leave every parameter checksum intact and change every answer.

So each saved step's `checksums.json` carries, beside the checksums of its own files, a
`binding`: the SHA-256 of each of those metadata files and the config the step was trained
with (`of_workdir`, written by `jcaps.train.checkpoints`). Loading a model checks the workdir
against the binding of its newest step (`check`) before it reads any parameters: a metadata file
that changed, or a config key whose value is not the one the parameters were trained with, is
one line naming the file or the key and both values. The keys a resumed run may change
(`jcaps.train.config.RESUMABLE_KEYS`: where the data is, how long to train, ...) are free to
differ; every other one changes what the workdir's answers are (`train.seed` draws the
validation split, and a generated dataset). A step saved before bindings existed binds nothing.
"""

from __future__ import annotations

import json
import os
from typing import Any

from jcaps.data.series import FEATURES_FILE, STATS_FILE
from jcaps.data.vocab import LABELS_FILE, VOCAB_FILE
from jcaps.errors import UserError
from jcaps.files import file_digest
from jcaps.train import config as config_lib
from jcaps.train import config_history, final_params

# The files of WORKDIR/checkpoints that say what a model's inputs and outputs are.
METADATA_FILES = (VOCAB_FILE, LABELS_FILE, STATS_FILE, FEATURES_FILE)
BINDING_KEY = "binding"
_HINT = "put back the workdir's own file, or train a new workdir"


class MismatchedWorkdir(UserError):
    """A workdir file that is not the one its parameters were trained with."""


def of_workdir(checkpoint_directory: str, config) -> dict[str, Any]:
    """The binding of a step saved now: {"files": {name: SHA-256} of the metadata files in
    `checkpoint_directory`, "config": the config as `config.json` holds it}."""
    files = {
        name: file_digest(os.path.join(checkpoint_directory, name))
        for name in METADATA_FILES
        if os.path.isfile(os.path.join(checkpoint_directory, name))
    }
    return {"files": files, "config": json.loads(config.to_json())}


def read(step_directory: str) -> dict | None:
    """The binding in `step_directory/checksums.json`, or None where it has none (a step saved
    before bindings, or a file that does not read: checking the step reports that)."""
    try:
        with open(os.path.join(step_directory, "checksums.json"), encoding="utf-8") as f:
            binding = json.load(f).get(BINDING_KEY)
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(binding, dict) and isinstance(binding.get("files"), dict) and isinstance(binding.get("config"), dict):
        return binding
    return None


def newest_step_directory(workdir: str) -> str | None:
    """WORKDIR/checkpoints/STEP of the newest step, or None."""
    steps = final_params.saved_steps(workdir)[0]
    return os.path.join(workdir, "checkpoints", str(max(map(int, steps)))) if steps else None


def check(workdir: str, config) -> None:
    """Raises `MismatchedWorkdir` (one line) when a metadata file of `workdir` or a key of its
    `config` (as read from config.json) differs from what its newest step was trained with."""
    step_directory = newest_step_directory(workdir)
    binding = read(step_directory) if step_directory is not None else None
    if step_directory is None or binding is None:
        return
    checkpoints = os.path.join(workdir, "checkpoints")
    for name, digest in sorted(binding["files"].items()):
        path = os.path.join(checkpoints, name)
        if not os.path.isfile(path):
            raise MismatchedWorkdir(f"{path} is missing: the model's parameters were trained with it", hint=_HINT)
        if file_digest(path) != digest:
            raise MismatchedWorkdir(
                f"{path} is not the file the parameters were trained with (its SHA-256 differs from the one "
                f"{step_directory}/checksums.json records)",
                hint=_HINT,
            )
    trained_with = config_history.upgraded(binding["config"], source=os.path.join(step_directory, "checksums.json"))
    differing = config_lib.incompatible_keys(trained_with, config)
    if differing:
        old, new = config_lib.flatten(trained_with), config_lib.flatten(json.loads(config.to_json()))
        key = differing[0]
        raise MismatchedWorkdir(
            f"{os.path.join(workdir, 'config.json')}: {key} is {new.get(key)!r}, but the parameters were "
            f"trained with {old.get(key)!r}"
            + (f" ({len(differing) - 1} more keys differ)" if len(differing) > 1 else ""),
            hint=_HINT,
        )
