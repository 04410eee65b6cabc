"""The model table: a model is found by `config.model.name`, not through a class hierarchy.

Every model is a flax.linen module called as `model(*inputs, train=...)` (the batch arrays its
family names: token ids, or a series and its mask) that returns a dict
with `scores` [B, J] and whatever explanations it has (attention maps, coupling coefficients).
Its family says how scores become a per-example loss and class probabilities, and, for
multi-label models, how a batch becomes predicted label sets.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import optax

from jcaps.models.cccapsnet import CCCapsNet
from jcaps.models.dilated_fcn import DilatedFCN
from jcaps.models.fasttext import FastText
from jcaps.models.icapsnet import ICapsNetLong, ICapsNetShort
from jcaps.models.input_cell_lstm import InputCellLSTM
from jcaps.models.sgm import SGM, BinaryRelevance
from jcaps.ops import losses
from jcaps.train.optim import make_optimizer


@dataclasses.dataclass(frozen=True)
class ModelFamily:
    """How to build a model from its config and how to read its outputs."""

    module: type
    # (outputs, batch, model_config) -> per-example loss [B]
    loss: Callable
    # outputs -> [B, J] class probabilities (what predict prints); None for models that only
    # generate label sets
    probabilities: Callable | None
    # model_config keys read by the family's functions (loss, predict_labels), not by the module
    loss_keys: tuple[str, ...] = ()
    # (config, num_steps) -> optax transformation, for models with their own optimiser recipe
    optimizer: Callable | None = None
    # the batch arrays the module is called with, positionally: token ids, or series and mask
    inputs: tuple[str, ...] = ("tokens",)
    # multi-label models: (apply_fn, params, batch, model_config) -> [B, J] predicted sets as 0/1
    predict_labels: Callable | None = None


def softmax_cross_entropy(outputs, batch, model_config):
    del model_config
    return losses.cross_entropy(outputs["scores"], batch["label"])


def softmax_probabilities(outputs):
    return jax.nn.softmax(outputs["scores"].astype(jnp.float32), axis=-1)


def capsule_probabilities(outputs):
    """Capsule lengths normalised to sum to 1 (lengths are independent scores in [0, 1))."""
    lengths = outputs["scores"].astype(jnp.float32)
    return lengths / jnp.maximum(jnp.sum(lengths, axis=-1, keepdims=True), 1e-12)


_LOSS_TERMS = {
    "margin": losses.margin_loss,
    "focal": losses.focal_loss,
    "cross_entropy": losses.cross_entropy,
    "ce": losses.cross_entropy,
}


def summed_loss(outputs, batch, model_config):
    """The sum of the `+`-separated terms of `model.loss` (e.g. 'margin+focal'), each one of
    margin, focal, cross_entropy (or ce), applied to the scores (capsule lengths or logits)."""
    terms = model_config.loss.split("+")
    unknown = [t for t in terms if t not in _LOSS_TERMS]
    if unknown:
        raise ValueError(f"model.loss terms must be among {', '.join(_LOSS_TERMS)}, not {', '.join(map(repr, unknown))}")
    return sum(_LOSS_TERMS[t](outputs["scores"], batch["label"]) for t in terms)


def cccapsnet_probabilities(outputs):
    """Normalised lengths for the capsule classifier, softmax for the linear one's logits."""
    return capsule_probabilities(outputs) if "class_capsules" in outputs else softmax_probabilities(outputs)


def cccapsnet_parameter_groups(params):
    """'embedding', 'classifier', or 'encoder' for each leaf, by its top-level module."""
    return jax.tree_util.tree_map_with_path(
        lambda path, _: path[0].key if path[0].key in ("embedding", "classifier") else "encoder", params
    )


def cccapsnet_optimizer(config, num_steps):
    """`train.optimizer` per parameter group, clipped once over all gradients: the encoder at
    `train.learning_rate`, the embedding at `train.embedding_learning_rate` (0: the encoder's),
    the classifier at `train.classifier_learning_rate`, all on the same `train.schedule` [ref:
    1e-3, 1e-3 and 1e-4, x0.1 at 50 % and 70 % of training]."""
    train = config.train
    groups = {}
    rates = {
        "embedding": train.get("embedding_learning_rate") or train.learning_rate,
        "encoder": train.learning_rate,
        "classifier": train.classifier_learning_rate,
    }
    for group, learning_rate in rates.items():
        group_config = train.copy_and_resolve_references()
        group_config.learning_rate = learning_rate
        # Clipping is by the norm of all gradients together, so it is applied once, below.
        group_config.grad_clip_norm = 0.0
        groups[group] = make_optimizer(group_config, num_steps)
    optimizer = optax.multi_transform(groups, cccapsnet_parameter_groups)
    if train.grad_clip_norm:
        return optax.chain(optax.clip_by_global_norm(train.grad_clip_norm), optimizer)
    return optimizer


def binary_relevance_loss(outputs, batch, model_config):
    del model_config
    return losses.sigmoid_binary_cross_entropy(outputs["scores"], batch["labels"])


def sigmoid_probabilities(outputs):
    """Independent per-label probabilities (multi-label: they need not sum to 1)."""
    return jax.nn.sigmoid(outputs["scores"].astype(jnp.float32))


def binary_relevance_labels(apply_fn, params, batch, model_config):
    """The labels whose probability reaches `model.threshold`."""
    outputs = apply_fn({"params": params}, batch["tokens"], train=False)
    return (sigmoid_probabilities(outputs) >= model_config.threshold).astype(jnp.float32)


def label_sequence_loss(outputs, batch, model_config):
    del model_config
    return losses.sequence_cross_entropy(outputs["logits"], batch["label_sequence"])


def decoded_labels(apply_fn, params, batch, model_config):
    """The label set an SGM model generates (greedy or beam search, per `model.decoding`)."""
    del model_config
    return apply_fn({"params": params}, batch["tokens"], method="predict")["labels"]


MODELS: dict[str, ModelFamily] = {
    "fasttext": ModelFamily(FastText, softmax_cross_entropy, softmax_probabilities),
    "icapsnet_short": ModelFamily(ICapsNetShort, summed_loss, capsule_probabilities, loss_keys=("loss",)),
    "icapsnet_long": ModelFamily(ICapsNetLong, summed_loss, capsule_probabilities, loss_keys=("loss",)),
    "cccapsnet": ModelFamily(
        CCCapsNet, summed_loss, cccapsnet_probabilities, loss_keys=("loss",), optimizer=cccapsnet_optimizer
    ),
    "input_cell_lstm": ModelFamily(
        InputCellLSTM, softmax_cross_entropy, softmax_probabilities, inputs=("series", "mask")
    ),
    "dilated_fcn": ModelFamily(DilatedFCN, softmax_cross_entropy, softmax_probabilities),
    "br": ModelFamily(
        BinaryRelevance,
        binary_relevance_loss,
        sigmoid_probabilities,
        loss_keys=("threshold",),
        predict_labels=binary_relevance_labels,
    ),
    "sgm": ModelFamily(
        SGM, label_sequence_loss, None, inputs=("tokens", "label_sequence"), predict_labels=decoded_labels
    ),
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
    if "vocab_size" in field_names:
        fields["vocab_size"] = vocab_size  # models over series size their first layer from the data
    return family.module(num_classes=num_classes, dtype=dtype, **fields)
