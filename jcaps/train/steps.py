"""The jit-compiled training and evaluation steps (free functions, as in the Flax examples).

Both take the model family's loss, so every model trains through the same two functions.
Metrics are sums and counts over the batch's real examples (weight 1); dividing happens on
the host at the end of an evaluation, so padded examples never count.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax.training import train_state
from jax.sharding import PartitionSpec

from jcaps.train import mesh as mesh_lib
from jcaps.train.families import model_inputs
from jcaps.train.metrics import multilabel_sums


class TrainState(train_state.TrainState):
    """Flax's TrainState (step, params, optimiser state) with the run's base RNG key (a typed
    key, `jax.random.key`; checkpoints hold its `key_data`, as they held the legacy uint32 keys)."""

    rng: jax.Array


def weighted_mean(values, weight):
    return jnp.sum(values * weight) / jnp.maximum(jnp.sum(weight), 1.0)


def train_step(state: TrainState, batch: dict, *, family, model_config):
    """One optimiser update. The step number is folded into the RNG, so a resumed run draws the
    same dropout masks as an uninterrupted one."""
    rng = jax.random.fold_in(state.rng, state.step)

    def loss_fn(params):
        outputs = state.apply_fn({"params": params}, *model_inputs(batch, family), train=True, rngs={"dropout": rng})
        per_example = family.loss(outputs, batch, model_config)
        return weighted_mean(per_example.astype(jnp.float32), batch["weight"]), outputs

    (loss, outputs), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    metrics = {
        "loss": loss,
        "grad_norm": optax.tree.norm(grads),
        "param_norm": optax.tree.norm(state.params),
    }
    if family.predict_labels is None:  # single-label: the class with the highest score
        correct = jnp.argmax(outputs.scores, axis=-1) == batch["label"]
        metrics["accuracy"] = weighted_mean(correct.astype(jnp.float32), batch["weight"])
    return state.apply_gradients(grads=grads), metrics


def eval_step(state: TrainState, batch: dict, *, family, model_config, num_classes: int, mesh):
    """Sums over the batch: `loss_sum`, `count`, and the confusion matrix [true, predicted]
    (single-label) or the counts of `multilabel_sums` (multi-label).

    A multi-label model's label sets are predicted on each device's rows of the batch (over
    `mesh`'s 'data' axis) on their own: a decoder's `while_loop` then stops when its own rows are
    done, instead of testing the whole batch: a cross-device reduction at every decoded token."""
    outputs = state.apply_fn({"params": state.params}, *model_inputs(batch, family), train=False)
    per_example = family.loss(outputs, batch, model_config).astype(jnp.float32)
    weight = batch["weight"]
    sums = {"loss_sum": jnp.sum(per_example * weight), "count": jnp.sum(weight)}
    if family.predict_labels is None:
        predicted = jnp.argmax(outputs.scores, axis=-1)
        pairs = (
            jax.nn.one_hot(batch["label"], num_classes)[:, :, None] * jax.nn.one_hot(predicted, num_classes)[:, None, :]
        )
        sums["confusion"] = jnp.einsum("bij,b->ij", pairs, weight)
    else:
        predict = functools.partial(family.predict_labels, state.apply_fn, model_config=model_config)
        # check_vma=False: the models are written for whole arrays (their loops start from fresh
        # zeros, which shard_map's type check would have them mark as varying per device);
        # nothing in them communicates across devices.
        per_device = jax.shard_map(
            predict,
            mesh=mesh,
            in_specs=(PartitionSpec(), PartitionSpec("data")),
            out_specs=PartitionSpec("data"),
            check_vma=False,
        )
        predicted = per_device(state.params, batch)
        sums.update(multilabel_sums(predicted, batch["labels"], weight))
    return sums


def compile_steps(config, family, num_classes: int, mesh, *, compiler_options: dict[str, Any] | None = None):
    """`train_step` and `eval_step` for `config`'s model, jitted with their shardings (state
    replicated, batch split over the mesh) and XLA's `compiler_options` (None: its defaults); the
    train step donates the state it updates."""
    replicated, sharded = mesh_lib.replicated(mesh), mesh_lib.batch_sharded(mesh)
    train = jax.jit(
        functools.partial(train_step, family=family, model_config=config.model),
        in_shardings=(replicated, sharded),
        out_shardings=(replicated, replicated),
        donate_argnums=0,
        compiler_options=compiler_options,
    )
    evaluate = jax.jit(
        functools.partial(eval_step, family=family, model_config=config.model, num_classes=num_classes, mesh=mesh),
        in_shardings=(replicated, sharded),
        out_shardings=replicated,
        compiler_options=compiler_options,
    )
    return train, evaluate
