"""How `jcaps.interpret` explains each jcaps model: the table `MODEL_HOOKS`, model name ->
`ModelHooks`, beside the training layer's model table, which knows nothing of explanations.

A row of an explained batch is one prediction: x [R, ...] the explained input (token ids, or a
series), side the module's second input or None (a series' mask; SGM: the generated label
sequence) and the output explained. Its positions are x's tokens (iCapsNets Long: its M x N
words, sentence by sentence) or a series' time steps; the vectors at them, [R, P, D], are what
the attribution methods differentiate and perturb. A model added to the training table
(`jcaps.train.families.MODELS`) is explained by adding its entry here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jcaps.data import vocab
from jcaps.models.outputs import ModelOutput
from jcaps.train.families import get_family, sigmoid_probabilities


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
    """(L, g) with the outputs on x = g(x, L(x, e)), L(x, e) [R, P, d_w] the region convolution of
    the word vectors e [R, P, D] by position (iCapsNets Long: sentence by sentence, M x N
    positions), affine in e; g applies the convolution activation (`conv_activation`) and the rest
    of the model to the regions it is given."""
    del model_config

    def region_convolution(x, e):
        regions = model.apply({"params": params}, x, e.reshape(x.shape + e.shape[-1:]), method="region_conv_of")
        return regions.reshape(e.shape[:2] + regions.shape[-1:])

    def after(x, z):
        return apply_rows(model, params, x, None, regions=z.reshape(x.shape + z.shape[-1:]))

    return region_convolution, after


def region_convolution_radius(model_config) -> int:
    """How far the region convolution reaches: word n's region reads words n - K // 2 .. n + K // 2
    of its sentence ('same' padding, K odd), never another sentence's."""
    return model_config.kernel_size // 2


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
class ModelHooks:
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
    # (model_config) -> r: L's output at position p reads the vectors within r positions of p
    # (occlusion and the sampling methods' `prefix_radius`), or None: anywhere
    prefix_radius: Callable | None = None
    # the model's own explanation of its positions: "capsules" (iCapsNets' local interpretation)
    # or "attention" (the `attention` callable below); None: it has none
    native: str | None = None
    # (model_config) -> whether a configuration has it; None: every one does
    has_native: Callable | None = None
    # (outputs, x, side, targets [R]) -> [R, P] the attention each position receives
    attention: Callable | None = None
    # why a model without its own explanation has none (the report says so)
    no_native_reason: str = ""
    # every position gets the same gradient (the output reads the mean of the vectors): the
    # methods of the gradient alone (`Method.gradient_only`) rank nothing and run only when named
    shared_gradient: bool = False
    # ((method, copies), ...): how many copies of the rows one call of the model scores for a method
    # of `METHODS`, where it runs faster at other than the method's `Method.copies_per_call`
    # (pairs, not a dict: an `ModelHooks` is hashed, a static argument of the jitted methods)
    copies_per_call: tuple[tuple[str, int], ...] = ()


ICAPSNET_HOOKS = ModelHooks(
    native="capsules", affine_prefix=region_convolution_prefix, prefix_radius=region_convolution_radius
)

# How a model of each kind (`ModelFamily.kind`) is explained where it has no entry of its own.
TEXT_HOOKS = ModelHooks()
SERIES_HOOKS = ModelHooks(
    vectors=series_values, apply_to_vectors=apply_to_series_values, positions=series_positions, removals=SERIES_REMOVALS
)
KIND_HOOKS = {"text": TEXT_HOOKS, "series": SERIES_HOOKS}

# The models explained otherwise than their kind's `KIND_HOOKS` entry.
MODEL_HOOKS: dict[str, ModelHooks] = {
    "fasttext": ModelHooks(no_native_reason="it averages its words", shared_gradient=True),
    "icapsnet_short": ICAPSNET_HOOKS,
    "icapsnet_long": ICAPSNET_HOOKS,
    "cccapsnet": ModelHooks(
        no_native_reason="its capsules route pooled BiGRU features, not positions",
        # A recurrence at batch 32 waits on each step's small product: more rows a call run faster,
        # in cache (benchmarks/copies_per_call.py).
        copies_per_call=(
            ("integrated_gradients", 5),
            ("occlusion", 8),
            ("kernel_shap", 32),
            ("shapley_sampling", 32),
            ("lime", 32),
        ),
    ),
    "input_cell_lstm": dataclasses.replace(
        SERIES_HOOKS,
        native="attention",
        has_native=attends_over_steps,
        attention=step_attention,
    ),
    "dilated_fcn": ModelHooks(native="attention", has_native=attends_over_positions, attention=attention_received),
    "br": ModelHooks(explained_outputs=label_probabilities, chosen_outputs=labels_at_threshold),
    "sgm": ModelHooks(
        explained_outputs=generated_label_log_probabilities,
        probabilities=generated_label_probabilities,
        native="attention",
        attention=source_attention_of_step,
    ),
}


def hooks_of(model_name: str) -> ModelHooks:
    """The `ModelHooks` of the model `model_name` (`config.model.name`): its entry in
    `MODEL_HOOKS`, else that of its kind."""
    if model_name in MODEL_HOOKS:
        return MODEL_HOOKS[model_name]
    return KIND_HOOKS[get_family(model_name).kind]
