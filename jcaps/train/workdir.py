"""Loading a trained workdir: its config, vocabulary, labels, model and parameters.

Evaluation, prediction and interpretation need nothing but the workdir. The parameters are
the ones training reported as final: those of the best validation evaluation when the run
selected one (`train.select_best`), else those of the last checkpoint; `TrainedModel` says
which (`parameters`, `selected_step`, `last_step`). Damaged parameters (their checksums do not
match, `jcaps.train.checkpoints`) and parameters that are not finite (NaN or infinity) are
refused with a `DamagedCheckpoint` naming the step, never loaded; `parameters="last"` asks for
the newest checkpoint that is intact and finite instead.

Loading is quick because it builds nothing it does not use: the final parameters come from
`final_params.msgpack` where it still describes the workdir (`jcaps.train.final_params`: no
orbax imported), else from the checkpoints, the structure of the saved parameters then coming from
`jax.eval_shape` (no compiled initialisation); the optimiser state stays on disk, the text
vocabulary is read without opening any split, and TFDS and grain are imported only when the
splits are opened (`with_data=True`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from typing import TYPE_CHECKING

import jax
import numpy as np

from jcaps.choices import check_choice
from jcaps.data.batching import ExampleDataset
from jcaps.data.text import make_text_dataset
from jcaps.data.vocab import LABELS_FILE, VOCAB_FILE, LabelMap, Vocabulary
from jcaps.errors import UserError
from jcaps.train import binding, final_params
from jcaps.train import config as config_lib
from jcaps.train import mesh as mesh_lib
from jcaps.train.config import ParameterChoice
from jcaps.train.families import ModelFamily, get_family
from jcaps.train.state import all_finite, dummy_inputs, model_for, parameter_shapes

if TYPE_CHECKING:
    import flax.linen as nn
    import ml_collections

    from jcaps.train.steps import TrainState


@dataclasses.dataclass
class TrainedModel:
    config: ml_collections.ConfigDict
    family: ModelFamily
    model: nn.Module
    params: object
    dataset: ExampleDataset  # splits are empty unless opened with `with_data=True`
    parameters: str = "last"  # "best" (on validation) or "last" (the last checkpoint's)
    selected_step: int = 0  # the training step whose parameters these are
    last_step: int = 0  # the step of the last checkpoint

    def apply(self, *inputs, **kwargs):
        """The model's outputs for `inputs` (the batch arrays named by the family's `inputs`)."""
        return self.model.apply({"params": self.params}, *inputs, train=False, **kwargs)

    @property
    def selection(self) -> dict:
        """`{"selected_step", "parameters", "last_step"}`: which parameters were loaded."""
        return {"selected_step": self.selected_step, "parameters": self.parameters, "last_step": self.last_step}

    def eval_state(self) -> TrainState:
        """A `TrainState` holding these parameters, for the evaluation step (which reads only
        `apply_fn` and `params`; the optimiser is a placeholder)."""
        import optax

        from jcaps.train.steps import TrainState

        return TrainState.create(
            apply_fn=self.model.apply, params=self.params, tx=optax.identity(), rng=jax.random.key(0)
        ).replace(step=self.selected_step)


def refuse_non_finite(trained: TrainedModel, outputs, what: str) -> None:
    """Raises a one-line `UserError` naming the step of `trained`'s parameters when `outputs`
    (the model's WHAT, e.g. "probabilities", on real inputs) hold NaN or infinity: finite
    parameters can still overflow, and such numbers are never served."""
    if not np.isfinite(np.asarray(outputs)).all():
        raise UserError(
            f"the {trained.parameters} parameters of step {trained.selected_step} give {what} that are "
            "not finite (NaN or infinity)",
            hint="--parameters last uses the newest intact checkpoint instead",
        )


def read_config(workdir: str):
    """The workdir's saved config (a locked ConfigDict), or a UserError naming the workdir."""
    path = os.path.join(workdir, "config.json")
    if not os.path.isfile(path):
        if not os.path.isdir(workdir):
            raise UserError(
                f"{workdir} does not exist: not a jcaps workdir", hint="pass the --workdir of a jcaps train run"
            )
        raise UserError(
            f"{workdir} has no config.json: not a jcaps workdir", hint="pass the --workdir of a jcaps train run"
        )
    try:
        with open(path, encoding="utf-8") as f:
            return config_lib.from_json(f.read(), source=path)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserError(f"{path} cannot be read: {error}", hint="the workdir is damaged; train it again") from error


def load_trained(
    workdir: str,
    *,
    with_data: bool = False,
    data_overrides: dict | None = None,
    model_overrides: dict | None = None,
    parameters: str = "final",
) -> TrainedModel:
    """The model of `workdir` with the parameters training reported as final (see module doc),
    or with `parameters="last"` those of the newest intact checkpoint (a warning on stderr names
    each newer, damaged one).
    `with_data`: also open its splits, reading the data from where `config.data` says, or from
    where `data_overrides` ({"dir": ..., "cache_dir": ...}: the `data.*` keys to change) say.
    `model_overrides`: `model.*` keys to change that leave the parameters as they are (decoding
    settings); each must be a key of the workdir's model, and the changed config is validated."""
    from absl import logging

    # orbax logs every restore at INFO, and at ERROR a step it could not read, which the load
    # reports itself in one line (or reads again, a step deleted by a training beside it).
    logging.set_verbosity(logging.FATAL)
    check_choice("--parameters", parameters, ParameterChoice, UserError)
    config = read_config(workdir)
    binding.check(workdir, config)
    if data_overrides:
        config = _with_overrides(config, "data", data_overrides)
    if model_overrides:
        config = _with_overrides(config, "model", model_overrides)
        config_lib.validate(config)
    directory = os.path.join(os.path.abspath(workdir), "checkpoints")
    if not os.path.isfile(os.path.join(directory, LABELS_FILE)) or not _has_steps(directory):
        raise UserError(
            f"{workdir} has no checkpoint yet", hint=f"train it first: jcaps train --config NAME --workdir {workdir}"
        )

    family = get_family(config.model.name)
    dataset = _open_dataset(config, family, directory, with_data)
    model = model_for(config, dataset)
    replicated = mesh_lib.replicated(mesh_lib.data_mesh())
    # Why the one-file copy was passed over is said once the checkpoints have been read: where
    # they are damaged too, the error that names the damage is the one line.
    passed_over: list[str] = []
    final = final_params.read(workdir, parameters, config.train.select_best, passed_over.append)
    if final is not None:
        params, which, selected, last_step = final
        params = jax.device_put(params, replicated)
    else:
        shapes = parameter_shapes(config, model, dummy_inputs(config, dataset))
        abstract_params = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated), shapes)
        params, which, selected, last_step = _read_params(
            workdir, abstract_params, parameters, config.train.select_best
        )
        for line in passed_over:
            _warn(line)
    return TrainedModel(config, family, model, params, dataset, which, int(selected), int(last_step))


# Reads of a workdir that a training changes meanwhile (a save, a step deleted) before one
# holds still; each starts with a new view of the saved steps.
READ_ATTEMPTS = 20


def _read_params(workdir: str, abstract_params, parameters: str, select_best: bool) -> tuple:
    """(params, "best" or "last", their step, the last checkpoint's step). A training writing the
    workdir commits each step whole (orbax renames it into place once written) but deletes old
    ones, the previous best among them, perhaps while they are read: a read that fails while
    the saved steps change is made again on the new ones (and says so on stderr), up to
    `READ_ATTEMPTS` times; one that fails on steps that hold still is what it says."""
    attempt = 1
    while True:
        before = final_params.saved_steps(workdir)
        try:
            return _read_params_once(workdir, abstract_params, parameters, select_best)
        except Exception:  # orbax and tensorstore report a file gone as a plain Exception
            if attempt == READ_ATTEMPTS or final_params.saved_steps(workdir) == before:
                raise
            _warn(f"warning: {workdir} changed while it was read (a training is writing it); reading it again")
            time.sleep(0.05 * attempt)
            attempt += 1


def _read_params_once(workdir: str, abstract_params, parameters: str, select_best: bool) -> tuple:
    from jcaps.train.checkpoints import Checkpoints

    checkpoints = Checkpoints(workdir, read_only=True)
    try:
        last_step = checkpoints.latest_step()
        if parameters == "last":
            selected, params = checkpoints.restore_newest_intact_params(abstract_params, _warn)
            return params, "last", selected, last_step
        return (*_final_params(checkpoints, abstract_params, select_best, last_step), last_step)
    finally:
        checkpoints.close()


def check_split(trained: TrainedModel, split: str, workdir: str) -> int:
    """The number of examples of `split` in the workdir's data; a UserError (naming --split) for a
    split the data has not, or an empty one: there is nothing to score or explain in it."""
    if split not in trained.dataset.splits:
        raise UserError(f"--split: no split {split!r}; the dataset has {', '.join(trained.dataset.splits)}")
    size = len(trained.dataset.splits[split].source)
    if not size:
        raise UserError(f"--split: the {split} split of {workdir}'s data is empty")
    return size


def _final_params(checkpoints, abstract_params, select_best: bool, last_step: int | None) -> tuple:
    """(params, "best" or "last", step) of the model training reported as final. Parameters that
    are not finite (saved before training checked them) are refused like damaged ones, naming
    the newest checkpoint whose parameters are finite."""
    from jcaps.train.checkpoints import NOT_FINITE, DamagedCheckpoint

    hint = (
        "--parameters last loads the newest checkpoint that is intact instead (the last parameters "
        "trained, not those selected on validation)"
    )
    try:
        record = checkpoints.best_record() if select_best else None
        if record is not None:
            step = int(record["step"])
            params, which = checkpoints.restore_best_params(abstract_params, step), "best"
            directory = checkpoints.best_directory
        else:
            assert last_step is not None  # the workdir has a checkpoint (`load_trained` checked)
            params, which, step = checkpoints.restore_params(abstract_params), "last", int(last_step)
            directory = checkpoints.directory
    except DamagedCheckpoint as damage:
        raise DamagedCheckpoint(damage.path, damage.problem, hint=hint) from damage
    if not all_finite(params):
        try:
            newest, _ = checkpoints.restore_newest_intact_params(abstract_params, lambda _: None)
            good = f"the newest checkpoint with finite parameters is step {newest}"
        except DamagedCheckpoint:
            good = "no checkpoint has finite parameters"
            hint = "train the workdir again with a lower train.learning_rate"
        raise DamagedCheckpoint(os.path.join(directory, str(step)), f"{NOT_FINITE}; {good}", hint=hint)
    return params, which, step


def _warn(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _has_steps(directory: str) -> bool:
    return os.path.isdir(directory) and any(name.isdigit() for name in os.listdir(directory))


def _with_overrides(config, block: str, overrides: dict):
    """`config` with the keys of `config[block]` that `overrides` names set to its values. A model
    key may also be a setting of the model that the saved config predates (it had the default)."""
    known = set(config[block])
    if block == "model":
        known |= {field.name for field in dataclasses.fields(get_family(config.model.name).module)}
    config = config.copy_and_resolve_references()
    config.unlock()
    for key, value in overrides.items():
        if key not in known:
            what = f"the {config.model.name} model" if block == "model" else "the config"
            raise UserError(f"--config.{block}.{key}: {what} has no key {block}.{key}")
        config[block][key] = value
    config.lock()
    return config


def _open_dataset(config, family: ModelFamily, directory: str, with_data: bool) -> ExampleDataset:
    if with_data:
        from jcaps.data import datasets
        from jcaps.train.progress import quiet_libraries

        quiet_libraries()  # no TFDS progress bars
        return datasets.load_dataset(config.data, config.train.seed, directory)
    if family.kind == "text":
        # Text: the saved vocabulary and labels encode new text exactly as in training.
        vocab = Vocabulary.load(os.path.join(directory, VOCAB_FILE))
        labels = LabelMap.load(os.path.join(directory, LABELS_FILE))
        return make_text_dataset(config.data, {}, vocab, labels)
    from jcaps.data import datasets

    return datasets.inference_dataset(config.data, directory)


def use_compilation_cache(setting: str) -> None:
    """Compiled programs are read from (and written to) the persistent cache `setting` (a
    `train.compilation_cache` value given by the command line, never the workdir's: a cache
    holds executables, and a workdir is data), however quickly they compiled: a command that
    runs the model a few times spends more time compiling than running."""
    cache = config_lib.compilation_cache_dir(setting)
    if not cache:
        return
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
