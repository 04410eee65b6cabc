"""The model table: a model is found by `config.model.name`, not through a class hierarchy.

Every model is a flax.linen module called as `model(*inputs, train=...)` (the batch arrays its
family names: token ids, or a series and its mask) that returns a `ModelOutput`: `scores` [B, J]
and whatever explanations it has (attention maps, coupling coefficients) in named fields.
Its family says how scores become a per-example loss and class probabilities, and, for
multi-label models, how a batch becomes predicted label sets; what `jcaps.interpret` explains of
a model, and how, is that package's own table (`jcaps.interpret.hooks`). Training a
model's parameters at their own rates is a config matter (`train.param_groups`,
`jcaps.train.optim`), not a family's.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterator, MutableMapping
from typing import Literal

import jax
import jax.numpy as jnp

from jcaps.choices import check_choice
from jcaps.data import vocab
from jcaps.errors import ConfigError
from jcaps.models.outputs import ModelOutput
from jcaps.ops import losses
from jcaps.train.config_history import new_name


def softmax_cross_entropy(outputs: ModelOutput, batch, model_config):
    del model_config
    return losses.cross_entropy(outputs.scores, batch["label"])


def softmax_probabilities(outputs: ModelOutput):
    return jax.nn.softmax(outputs.scores.astype(jnp.float32), axis=-1)


def capsule_probabilities(outputs: ModelOutput):
    """Capsule lengths normalised to sum to 1 (lengths are independent scores in [0, 1))."""
    lengths = outputs.scores.astype(jnp.float32)
    return lengths / jnp.maximum(jnp.sum(lengths, axis=-1, keepdims=True), 1e-12)


_LOSS_TERMS: dict[str, Callable[[jax.Array, jax.Array], jax.Array]] = {
    "margin": losses.margin_loss,
    "focal": losses.focal_loss,
    "cross_entropy": losses.cross_entropy,
    "ce": losses.cross_entropy,
}


def summed_loss(outputs: ModelOutput, batch, model_config):
    """The sum of the `+`-separated terms of `model.loss` (e.g. 'margin+focal'), each one of
    margin, focal, cross_entropy (or ce), applied to the scores (capsule lengths or logits)."""
    terms = model_config.loss.split("+")
    unknown = [t for t in terms if t not in _LOSS_TERMS]
    if unknown:
        raise ValueError(
            f"model.loss terms must be among {', '.join(_LOSS_TERMS)}, not {', '.join(map(repr, unknown))}"
        )
    return sum(_LOSS_TERMS[t](outputs.scores, batch["label"]) for t in terms)


def cccapsnet_probabilities(outputs: ModelOutput):
    """Normalised lengths for the capsule classifier, softmax for the linear one's logits (it
    has no class capsules)."""
    return softmax_probabilities(outputs) if outputs.class_capsules is None else capsule_probabilities(outputs)


def binary_relevance_loss(outputs: ModelOutput, batch, model_config):
    del model_config
    return losses.sigmoid_binary_cross_entropy(outputs.scores, batch["labels"])


def sigmoid_probabilities(outputs: ModelOutput):
    """Independent per-label probabilities (multi-label: they need not sum to 1)."""
    return jax.nn.sigmoid(outputs.scores.astype(jnp.float32))


def binary_relevance_labels(apply_fn, params, batch, model_config):
    """The labels whose probability reaches `model.threshold`."""
    outputs = apply_fn({"params": params}, batch["tokens"], train=False)
    return (sigmoid_probabilities(outputs) >= model_config.threshold).astype(jnp.float32)


def label_sequence_loss(outputs: ModelOutput, batch, model_config):
    del model_config
    assert outputs.step_logits is not None  # SGM's outputs
    return losses.sequence_cross_entropy(outputs.step_logits, batch["label_sequence"])


def decoded_labels(apply_fn, params, batch, model_config):
    """The label set an SGM model generates (greedy or beam search, per `model.decoding`)."""
    del model_config
    return apply_fn({"params": params}, batch["tokens"], method="predict").labels


# What a model reads: a text's token ids, or a series of feature vectors and its mask.
ModelKind = Literal["text", "series"]
# The batch arrays a model of each kind is called with first, positionally.
KIND_INPUTS: dict[str, tuple[str, ...]] = {"text": ("tokens",), "series": ("series", "mask")}


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
    # multi-label models: (apply_fn, params, batch, model_config) -> [B, J] predicted sets as 0/1
    predict_labels: Callable | None = None
    # what the model reads: its data, its commands' inputs (text or series) and its explanations
    # follow from it
    kind: ModelKind = "text"
    # batch arrays the module is called with after those of its kind (SGM: the label sequence)
    extra_inputs: tuple[str, ...] = ()

    def __post_init__(self):
        check_choice("kind", self.kind, ModelKind)

    @property
    def inputs(self) -> tuple[str, ...]:
        """The batch arrays the module is called with, positionally."""
        return KIND_INPUTS[self.kind] + self.extra_inputs


def imported_family(module: str, *args, **kwargs) -> Callable[[], ModelFamily]:
    """The `ModelFamily(MODULE, *args, **kwargs)` of the flax module named `module`
    ("package.module.Class"), built, and the module imported, when called (`ModelTable`)."""

    def family() -> ModelFamily:
        package, name = module.rsplit(".", 1)
        return ModelFamily(getattr(importlib.import_module(package), name), *args, **kwargs)

    return family


class ModelTable(MutableMapping[str, ModelFamily]):
    """Model name -> `ModelFamily`. An entry given as a function (`imported_family`) is built when
    it is first read: a command that loads one model imports that model's code alone."""

    def __init__(self, entries: dict[str, ModelFamily | Callable[[], ModelFamily]]):
        self._entries = dict(entries)

    def __getitem__(self, name: str) -> ModelFamily:
        entry = self._entries[name]
        if not isinstance(entry, ModelFamily):
            entry = self._entries[name] = entry()
        return entry

    def __setitem__(self, name: str, family: ModelFamily) -> None:
        self._entries[name] = family

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


MODELS = ModelTable(
    {
        "fasttext": imported_family(
            "jcaps.models.fasttext.FastText",
            softmax_cross_entropy,
            softmax_probabilities,
        ),
        "icapsnet_short": imported_family(
            "jcaps.models.icapsnet.ICapsNetShort",
            summed_loss,
            capsule_probabilities,
            loss_keys=("loss",),
        ),
        "icapsnet_long": imported_family(
            "jcaps.models.icapsnet.ICapsNetLong",
            summed_loss,
            capsule_probabilities,
            loss_keys=("loss",),
        ),
        "cccapsnet": imported_family(
            "jcaps.models.cccapsnet.CCCapsNet",
            summed_loss,
            cccapsnet_probabilities,
            loss_keys=("loss",),
        ),
        "input_cell_lstm": imported_family(
            "jcaps.models.input_cell_lstm.InputCellLSTM",
            softmax_cross_entropy,
            softmax_probabilities,
            kind="series",
        ),
        "dilated_fcn": imported_family(
            "jcaps.models.dilated_fcn.DilatedFCN",
            softmax_cross_entropy,
            softmax_probabilities,
        ),
        "br": imported_family(
            "jcaps.models.sgm.BinaryRelevance",
            binary_relevance_loss,
            sigmoid_probabilities,
            loss_keys=("threshold",),
            predict_labels=binary_relevance_labels,
        ),
        "sgm": imported_family(
            "jcaps.models.sgm.SGM",
            label_sequence_loss,
            None,
            extra_inputs=("label_sequence",),
            predict_labels=decoded_labels,
        ),
    }
)


def get_family(name: str) -> ModelFamily:
    if name not in MODELS:
        raise ValueError(f"unknown model.name {name!r}; known models: {', '.join(sorted(MODELS))}")
    return MODELS[name]


def model_inputs(batch: dict, family: ModelFamily) -> tuple:
    """The batch arrays the model is called with, in the order of its family's `inputs`."""
    return tuple(batch[name] for name in family.inputs)


def build_model(model_config, vocab_size: int, num_classes: int, dtype=jnp.float32):
    """The flax module for `model_config` (its keys except `name` are the module's fields)."""
    family = get_family(model_config.name)
    fields = {k: v for k, v in model_config.items() if k != "name" and k not in family.loss_keys}
    field_names = {f.name for f in dataclasses.fields(family.module)}
    unknown = sorted(set(fields) - field_names)
    for key in unknown:
        renamed = new_name("model", key, model_config.name)
        if renamed:
            raise ConfigError(f"config.model.{key} was renamed model.{renamed}")
    if unknown:
        raise ConfigError(f"model {model_config.name!r} has no setting(s) {', '.join(unknown)}")
    if "vocab_size" in field_names:
        fields["vocab_size"] = vocab_size  # models over series size their first layer from the data
    # The label vocabulary's special ids, for the models that generate label sequences.
    special_ids = {"bos_id": vocab.BOS, "eos_id": vocab.EOS, "num_special": vocab.NUM_SPECIAL}
    fields.update({name: value for name, value in special_ids.items() if name in field_names})
    try:
        return family.module(num_classes=num_classes, dtype=dtype, **fields)
    except ValueError as error:  # a module's own check of its settings, e.g. a knob out of range
        raise ConfigError(f"config.model: {error}") from error
