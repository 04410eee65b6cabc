"""What training and loading build from a config before the first step: the model, the shapes
of its parameters, and the replicated training state.

Every command that needs a model builds it here, so training, loading a workdir
(`jcaps.train.workdir`) and counting parameters (`jcaps.params`) cannot disagree on its
inputs, dtype or parameter tree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from jcaps.train import mesh as mesh_lib
from jcaps.train.families import build_model, get_family, model_inputs

if TYPE_CHECKING:
    from jcaps.train.steps import TrainState

# `train.dtype` -> the dtype of the model's activations (parameters stay float32).
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def model_for(config, dataset):
    """The flax module of `config.model`, sized by `dataset` (its vocabulary or features and
    classes), computing in `train.dtype`."""
    return build_model(config.model, dataset.model_input_size, dataset.num_classes, DTYPES[config.train.dtype])


def dummy_inputs(config, dataset) -> tuple:
    """The model's inputs for a tiny batch of `dataset`, which its init traces."""
    return model_inputs(dataset.dummy_batch(), get_family(config.model.name))


def _init_params(model, inputs: tuple):
    """`rng -> params`: the model's init on `inputs`."""

    def init(rng):
        return model.init({"params": rng, "dropout": rng}, *inputs, train=False)["params"]

    return init


def parameter_shapes(config, model, inputs: tuple):
    """The parameter tree of `model` with `jax.ShapeDtypeStruct` leaves: traced by
    `jax.eval_shape` of its init on `inputs` (`dummy_inputs`), never computed."""
    return jax.eval_shape(_init_params(model, inputs), jax.random.key(config.train.seed))


def create_train_state(config, model, inputs: tuple, num_steps: int, mesh) -> TrainState:
    """The initial state of a run of `num_steps` updates: parameters from `train.seed` (the
    model's init on `inputs`, e.g. `dummy_inputs`), the optimiser of `config.train`. Born
    replicated: `jit(init, out_shardings=...)`."""
    from jcaps.train.optim import make_optimizer  # optax: loaded only by training
    from jcaps.train.steps import TrainState

    init_rng, state_rng = jax.random.split(jax.random.key(config.train.seed))
    init_params = _init_params(model, inputs)
    tx = make_optimizer(config.train, num_steps)

    def init(rng):
        return TrainState.create(apply_fn=model.apply, params=init_params(rng), tx=tx, rng=state_rng)

    return jax.jit(init, out_shardings=mesh_lib.replicated(mesh))(init_rng)


def parameter_count(params) -> int:
    """The number of scalars in a parameter tree (of arrays or shapes)."""
    return int(sum(np.prod(x.shape) for x in jax.tree.leaves(params)))


@jax.jit
def _all_finite(tree):
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(leaf)) for leaf in jax.tree.leaves(tree)]))


def all_finite(params) -> bool:
    """Whether every value of a parameter tree is finite (no NaN, no infinity): reduced on the
    device, so only one boolean reaches the host."""
    return bool(_all_finite(params))
