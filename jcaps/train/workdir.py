"""Loading a trained workdir: its config, vocabulary, labels, model and latest parameters.

Evaluation, prediction and interpretation need nothing but the workdir.
"""

from __future__ import annotations

import dataclasses
import os

from jcaps.data import datasets
from jcaps.data.pipeline import ExampleDataset
from jcaps.errors import UserError
from jcaps.models import ModelFamily, build_model, get_family
from jcaps.train import config as config_lib
from jcaps.train import loop
from jcaps.train import mesh as mesh_lib
from jcaps.train.checkpoints import Checkpoints
from jcaps.train.steps import TrainState, model_inputs


@dataclasses.dataclass
class TrainedModel:
    config: object
    family: ModelFamily
    model: object
    state: TrainState
    dataset: ExampleDataset  # splits are empty unless opened with `with_data=True`

    @property
    def params(self):
        return self.state.params

    def apply(self, *inputs, **kwargs):
        """The model's outputs for `inputs` (the batch arrays named by the family's `inputs`)."""
        return self.model.apply({"params": self.state.params}, *inputs, train=False, **kwargs)


def load_trained(workdir: str, *, with_data: bool = False) -> TrainedModel:
    """The model of `workdir` at its latest checkpoint (`with_data`: also open its splits)."""
    loop.quiet_libraries()
    path = os.path.join(workdir, "config.json")
    if not os.path.isfile(path):
        raise UserError(f"{workdir} has no config.json: not a jcaps workdir", hint="pass the --workdir of a train.py run")
    with open(path, encoding="utf-8") as f:
        config = config_lib.from_json(f.read())
    checkpoints = Checkpoints(workdir, keep=config.train.keep_checkpoints)
    if not datasets.has_metadata(checkpoints.directory) or checkpoints.latest_step() is None:
        raise UserError(f"{workdir} has no checkpoint yet", hint="train it first with train.py --workdir " + workdir)
    if with_data:
        dataset = datasets.load_dataset(config.data, config.train.seed, checkpoints.directory)
    else:
        dataset = datasets.inference_dataset(config.data, checkpoints.directory)
    family = get_family(config.model.name)
    model = build_model(config.model, dataset.model_input_size, dataset.num_classes, loop.DTYPES[config.train.dtype])
    mesh = mesh_lib.data_mesh()
    inputs = model_inputs(dataset.dummy_batch(), family)
    state = loop.create_train_state(config, model, family.optimizer or loop.default_optimizer, inputs, 1, mesh)
    state, _ = checkpoints.restore(state, with_data=False)
    if config.train.select_best and checkpoints.best_record() is not None:
        # The model that training reported as final: the best on validation.
        state = state.replace(params=checkpoints.restore_best_params(state.params))
    checkpoints.close()
    return TrainedModel(config, family, model, state, dataset)
