"""The model table: a model is found by `config.model.name`, not through a class hierarchy.

Every model is a flax.linen module called as `model(inputs, train=...)` that returns a dict
with `scores` [B, J] and whatever explanations it has (attention maps, coupling coefficients).
Its family says how scores become a per-example loss and class probabilities.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp

from jcaps.models.fasttext import FastText
from jcaps.models.icapsnet import ICapsNetLong, ICapsNetShort
from jcaps.ops import losses


@dataclasses.dataclass(frozen=True)
class ModelFamily:
    """How to build a model from its config and how to read its outputs."""

    module: type
    # (outputs, batch, model_config) -> per-example loss [B]
    loss: Callable
    # outputs -> [B, J] class probabilities (what predict prints)
    probabilities: Callable
    # model_config keys read by `loss`, not passed to the module
    loss_keys: tuple[str, ...] = ()
    # (config, num_steps) -> optax transformation, for models with their own optimiser recipe
    optimizer: Callable | None = None


def softmax_cross_entropy(outputs, batch, model_config):
    del model_config
    return losses.cross_entropy(outputs["scores"], batch["label"])


def softmax_probabilities(outputs):
    return jax.nn.softmax(outputs["scores"].astype(jnp.float32), axis=-1)


def capsule_loss(outputs, batch, model_config):
    """Margin loss on the class-capsule lengths (`loss='margin'`), or cross-entropy on them."""
    if model_config.loss == "margin":
        return losses.margin_loss(outputs["scores"], batch["label"])
    if model_config.loss == "cross_entropy":
        return losses.cross_entropy(outputs["scores"], batch["label"])
    raise ValueError(f"model.loss must be margin or cross_entropy, not {model_config.loss!r}")


def capsule_probabilities(outputs):
    """Capsule lengths normalised to sum to 1 (lengths are independent scores in [0, 1))."""
    lengths = outputs["scores"].astype(jnp.float32)
    return lengths / jnp.maximum(jnp.sum(lengths, axis=-1, keepdims=True), 1e-12)


MODELS: dict[str, ModelFamily] = {
    "fasttext": ModelFamily(FastText, softmax_cross_entropy, softmax_probabilities),
    "icapsnet_short": ModelFamily(ICapsNetShort, capsule_loss, capsule_probabilities, loss_keys=("loss",)),
    "icapsnet_long": ModelFamily(ICapsNetLong, capsule_loss, capsule_probabilities, loss_keys=("loss",)),
}


def get_family(name: str) -> ModelFamily:
    if name not in MODELS:
        raise ValueError(f"unknown model.name {name!r}; known models: {', '.join(sorted(MODELS))}")
    return MODELS[name]


def build_model(model_config, vocab_size: int, num_classes: int, dtype=jnp.float32):
    """The flax module for `model_config` (its keys except `name` are the module's fields)."""
    family = get_family(model_config.name)
    fields = {k: v for k, v in model_config.items() if k != "name" and k not in family.loss_keys}
    field_names = {f.name for f in dataclasses.fields(family.module)}
    unknown = sorted(set(fields) - field_names)
    if unknown:
        raise ValueError(f"model {model_config.name!r} has no setting(s) {', '.join(unknown)}")
    return family.module(vocab_size=vocab_size, num_classes=num_classes, dtype=dtype, **fields)
