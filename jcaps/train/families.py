"""The model table: a model is found by `config.model.name`, not through a class hierarchy.

Every model is a flax.linen module called as `model(*inputs, train=...)` (the batch arrays its
family names: token ids, or a series and its mask) that returns a `ModelOutput`: `scores` [B, J]
and whatever explanations it has (attention maps, coupling coefficients) in named fields.
Its family says how scores become a per-example loss and class probabilities, and, for
multi-label models, how a batch becomes predicted label sets; its `Explanation`, what
`jcaps.interpret` explains of its predictions and how. Training a model's parameters at their own
rates is a config matter (`train.param_groups`, `jcaps.train.optim`), not a family's.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterator, MutableMapping

import jax
import jax.numpy as jnp
import numpy as np

from jcaps.data import vocab
from jcaps.errors import ConfigError
from jcaps.models.outputs import ModelOutput
from jcaps.ops import losses
from jcaps.train.config import new_name


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


# ---------------------------------------------------------------------------------------------
# Explanations. A row of an explained batch is one prediction: x [R, ...] the explained input
# (token ids, or a series), side the module's second input or None (a series' mask; SGM: the
# generated label sequence) and the output explained. Its positions are x's tokens (iCapsNets
# Long: its M x N words, sentence by sentence) or a series' time steps; the vectors at them,
# [R, P, D], are what the attribution methods differentiate and perturb.
# ---------------------------------------------------------------------------------------------


def apply_rows(model, params, x, side, **kwargs):
    """The module's outputs in inference on explained rows: x and, when there is one, side."""
    return model.apply({"params": params}, x, *(() if side is None else (side,)), train=False, **kwargs)


def word_vectors(model, params, x, side):
    """[R, P, D] the vectors a text model reads at x's tokens (words, characters, or the
    composed CWC / CC vectors): its `embeddings` output."""
    words = apply_rows(model, params, x, side).embeddings
    return words.reshape(x.shape[0], -1, words.shape[-1])


def apply_to_word_vectors(model, params, x, side, vectors):
    """The outputs of a text model on x with the vectors [R, P, D] in place of those it would
    look up (its `embeddings` argument)."""
    return apply_rows(model, params, x, side, embeddings=vectors.reshape(x.shape + vectors.shape[-1:]))


def token_positions(x, side):
    """(x's token ids by position [R, P], [R, P] True at the real tokens)."""
    del side
    tokens = x.reshape(x.shape[0], -1)
    return tokens, tokens > 0


def series_values(model, params, x, side):
    """[R, T, N] a series' own values: the vector at a time step is its N features."""
    del model, params, side
    return x.astype(jnp.float32)


def apply_to_series_values(model, params, x, side, vectors):
    """The outputs of a series model on the values [R, T, N] in place of x, with x's mask side."""
    return apply_rows(model, params, vectors.reshape(x.shape), side)


def series_positions(x, side):
    """(x [R, T, N] by time step, side [R, T]: the mask of its real steps)."""
    return x, side


# What a removed position becomes in faithfulness, by its `--removal` name (the first is the
# default): a token becomes PAD (the model masks it out) or UNK (a position it still reads), a
# series step zeros.
TOKEN_REMOVALS = (("pad", vocab.PAD), ("unk", vocab.UNK))
SERIES_REMOVALS = (("zeros", 0.0),)


def raw_scores(outputs: ModelOutput, side):
    """[R, J] the scores themselves (logits or capsule lengths)."""
    del side
    return outputs.scores


def label_probabilities(outputs: ModelOutput, side):
    """[R, J] each label's sigmoid probability."""
    del side
    return sigmoid_probabilities(outputs)


def generated_label_log_probabilities(outputs: ModelOutput, side):
    """[R, S] the log-probability of the label generated at each step, teacher-forced on the
    generated label sequence side [R, S]."""
    assert outputs.step_logits is not None  # SGM's outputs
    log_probs = jax.nn.log_softmax(outputs.step_logits.astype(jnp.float32), axis=-1)
    return jnp.take_along_axis(log_probs, side[..., None].astype(jnp.int32), axis=-1)[..., 0]


def generated_label_probabilities(outputs: ModelOutput, side):
    """[R, S] the probability of the label generated at each step."""
    return jnp.exp(generated_label_log_probabilities(outputs, side))


def predicted_class(probabilities, model_config):
    """[the most probable class] of one example's probabilities [J] (NumPy)."""
    del model_config
    return [int(np.argmax(probabilities))]


def labels_at_threshold(probabilities, model_config):
    """The labels whose probability (of [J], NumPy) reaches `model.threshold`, most probable first."""
    return [int(j) for j in np.argsort(-probabilities) if probabilities[j] >= model_config.threshold]


def region_convolution_prefix(model, params, model_config):
    """(L, g) with the outputs on x = g(x, L(x, e)), L(x, e) the region convolution of the word
    vectors e, affine in e; g applies the convolution activation (`conv_activation`) and the rest
    of the model to the regions it is given."""
    del model_config

    def region_convolution(x, e):
        return model.apply({"params": params}, x, e.reshape(x.shape + e.shape[-1:]), method="region_conv_of")

    def after(x, z):
        return apply_rows(model, params, x, None, regions=z)

    return region_convolution, after


def source_attention_of_step(outputs: ModelOutput, x, side, targets):
    """[R, L] SGM's attention over the source at the step that emitted each row's label
    (`source_attention` [R, S, L]; targets [R] the steps)."""
    del x, side
    assert outputs.source_attention is not None  # SGM's outputs
    return jnp.take_along_axis(outputs.source_attention, targets[:, None, None], axis=1)[:, 0]


def attends_over_positions(model_config) -> bool:
    """Whether the dilated FCN's attention weighs positions: dot-product attention, or simplified /
    local attention over time (over channels it ranks none)."""
    attention = model_config.get("attention", "none")
    over_time = attention.startswith("dot") or model_config.get("attention_axis", "channels") == "time"
    return attention != "none" and over_time


def attention_received(outputs: ModelOutput, x, side, targets):
    """[R, L] the dilated FCN's attention each position receives: dot-product weights
    (`head_attention` [R, H, L, L], query by key) averaged over the heads and the real queries;
    simplified / local weights over time (`elementwise_attention` [R, L, F]) averaged over the
    channels."""
    del side, targets
    weights = outputs.head_attention
    if weights is None:
        assert outputs.elementwise_attention is not None  # simplified / local attention's weights
        return jnp.mean(outputs.elementwise_attention, axis=-1)
    valid = (x > 0).astype(weights.dtype)
    received = jnp.einsum("rhqk,rq->rk", weights, valid)
    return received / jnp.maximum(weights.shape[1] * jnp.sum(valid, axis=-1, keepdims=True), 1.0)


def attends_over_steps(model_config) -> bool:
    """Whether the input-cell model (or its baseline) attends over the time steps."""
    return model_config.get("variant", "input_cell") in ("input_cell", "lstm_self_attention")


def step_attention(outputs: ModelOutput, x, side, targets):
    """[R, T] the attention over the time steps, averaged over the hops: the input-cell attention
    A_T of the last step (`input_attention_logits` [R, T, r], a softmax over the real steps side)
    or the structured self-attention of the LSTM baseline (`hop_attention` [R, r, T])."""
    del x, targets
    if outputs.input_attention_logits is None:
        assert outputs.hop_attention is not None  # the self-attention baseline's weights
        return jnp.mean(outputs.hop_attention, axis=1)
    logits = jnp.where(side[..., None], outputs.input_attention_logits, -jnp.inf)
    return jnp.mean(jax.nn.softmax(logits, axis=1), axis=-1)


@dataclasses.dataclass(frozen=True)
class Explanation:
    """How `jcaps.interpret` explains a family's predictions; the defaults: a single-label text
    model that reads word vectors and has no explanation of its own. The callables take rows x
    and side (see the section comment); `model` is the module, `params` its parameters."""

    # (model, params, x, side) -> [R, P, D] the vectors at the positions
    vectors: Callable = word_vectors
    # (model, params, x, side, vectors [k R, P, D]) -> the module's outputs on x and side stacked
    # k times, read with these vectors
    apply_to_vectors: Callable = apply_to_word_vectors
    # (x, side) -> (x by position [R, P, ...], [R, P] True at the real positions)
    positions: Callable = token_positions
    # ((name, value), ...): what a removed position becomes (faithfulness); the first is the default
    removals: tuple = TOKEN_REMOVALS
    # (outputs, side) -> [R, C] the outputs a row explains: what the methods differentiate
    explained_outputs: Callable = raw_scores
    # (outputs, side) -> [R, C] their probabilities (faithfulness reads these); None: the family's
    # `probabilities`
    probabilities: Callable | None = None
    # (probabilities [J] of an example (NumPy), model_config) -> the outputs explained, in report
    # order. A family without `probabilities` generates its labels (`method="predict"`) instead,
    # and each generated label is explained at the step that emitted it.
    chosen_outputs: Callable = predicted_class
    # (model, params, model_config) -> (L, g) with the outputs on x = g(x, L(x, e)) and L affine in
    # the vectors e, or None: integrated gradients then integrates behind L
    affine_prefix: Callable | None = None
    # the model's own explanation of its positions: "capsules" (iCapsNets' local interpretation)
    # or "attention" (the `attention` callable below); None: it has none
    native: str | None = None
    # (model_config) -> whether a configuration has it; None: every one does
    has_native: Callable | None = None
    # (outputs, x, side, targets [R]) -> [R, P] the attention each position receives
    attention: Callable | None = None
    # why a model without its own explanation has none (the report says so)
    no_native_reason: str = ""


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
    # the batch arrays the module is called with, positionally: token ids, or series and mask
    inputs: tuple[str, ...] = ("tokens",)
    # multi-label models: (apply_fn, params, batch, model_config) -> [B, J] predicted sets as 0/1
    predict_labels: Callable | None = None
    # what `jcaps.interpret` explains of the model's predictions, and how
    explanation: Explanation = Explanation()


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


ICAPSNET_EXPLANATION = Explanation(native="capsules", affine_prefix=region_convolution_prefix)

MODELS = ModelTable(
    {
        "fasttext": imported_family(
            "jcaps.models.fasttext.FastText",
            softmax_cross_entropy,
            softmax_probabilities,
            explanation=Explanation(no_native_reason="it averages its words"),
        ),
        "icapsnet_short": imported_family(
            "jcaps.models.icapsnet.ICapsNetShort",
            summed_loss,
            capsule_probabilities,
            loss_keys=("loss",),
            explanation=ICAPSNET_EXPLANATION,
        ),
        "icapsnet_long": imported_family(
            "jcaps.models.icapsnet.ICapsNetLong",
            summed_loss,
            capsule_probabilities,
            loss_keys=("loss",),
            explanation=ICAPSNET_EXPLANATION,
        ),
        "cccapsnet": imported_family(
            "jcaps.models.cccapsnet.CCCapsNet",
            summed_loss,
            cccapsnet_probabilities,
            loss_keys=("loss",),
            explanation=Explanation(no_native_reason="its capsules route pooled BiGRU features, not positions"),
        ),
        "input_cell_lstm": imported_family(
            "jcaps.models.input_cell_lstm.InputCellLSTM",
            softmax_cross_entropy,
            softmax_probabilities,
            inputs=("series", "mask"),
            explanation=Explanation(
                vectors=series_values,
                apply_to_vectors=apply_to_series_values,
                positions=series_positions,
                removals=SERIES_REMOVALS,
                native="attention",
                has_native=attends_over_steps,
                attention=step_attention,
            ),
        ),
        "dilated_fcn": imported_family(
            "jcaps.models.dilated_fcn.DilatedFCN",
            softmax_cross_entropy,
            softmax_probabilities,
            explanation=Explanation(
                native="attention", has_native=attends_over_positions, attention=attention_received
            ),
        ),
        "br": imported_family(
            "jcaps.models.sgm.BinaryRelevance",
            binary_relevance_loss,
            sigmoid_probabilities,
            loss_keys=("threshold",),
            predict_labels=binary_relevance_labels,
            explanation=Explanation(explained_outputs=label_probabilities, chosen_outputs=labels_at_threshold),
        ),
        "sgm": imported_family(
            "jcaps.models.sgm.SGM",
            label_sequence_loss,
            None,
            inputs=("tokens", "label_sequence"),
            predict_labels=decoded_labels,
            explanation=Explanation(
                explained_outputs=generated_label_log_probabilities,
                probabilities=generated_label_probabilities,
                native="attention",
                attention=source_attention_of_step,
            ),
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
