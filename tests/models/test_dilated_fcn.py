"""DilatedFCN: shapes of every attention variant, causality of the position logits by
gradients through the model's forward, padding invariance of the scores, knob validation."""

import functools
from typing import get_args

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.models.choices import DilatedFCNAttention
from jcaps.models.dilated_fcn import DilatedFCN, is_causal
from jcaps.models.outputs import ModelOutput

J, L = 3, 8
# Small but complete: 16 filters (8 groups of 2 for the *8 variants), two residual layers.
SMALL = {"embed_dim": 4, "filters": 16, "num_layers": 2, "width": 3}
# Every variant; simplified / local on both softmax axes (the grouped ones on channels: over
# time the softmax is per channel, groups or not); the gated residual activation once.
CASES = [
    ("none", "channels", "none"),
    ("dot", "channels", "none"),
    ("dot8", "channels", "none"),
    *((name, axis, "none") for name in ("simplified", "local") for axis in ("channels", "time")),
    ("simplified8", "channels", "none"),
    ("local8", "channels", "gated"),
]
CASE_IDS = ["-".join(case) for case in CASES]


def _model(attention, axis, activation, vocab_size=L + 1):
    return DilatedFCN(vocab_size, J, attention=attention, attention_axis=axis, activation=activation, **SMALL)


def _random_params(model, tokens, seed=0):
    """Parameters of `model.init`'s shapes with N(0, 0.3^2) values (biases included), from
    `jax.eval_shape`, which compiles nothing. (Larger values saturate the dot-product softmax,
    whose exactly-zero weights would hide positions from the gradients.)"""
    rng = np.random.default_rng(seed)
    shapes = jax.eval_shape(model.init, jax.random.key(0), tokens)["params"]
    return jax.tree.map(lambda s: rng.normal(scale=0.3, size=s.shape).astype(np.float32), shapes)


# Right-padded sequences of lengths 8, 5, 1 and 0 (token ids in 1..L).
LENGTHS = np.array([8, 5, 1, 0])
TOKENS = np.where(np.arange(L)[None, :] < LENGTHS[:, None], np.arange(1, L + 1)[None, :], 0).astype(np.int32)


@functools.cache
def _run(attention, axis, activation):
    """One compiled computation per case, shared by the tests below:

    jacobian [L, L + 1, E]: d sum_j position_logits[0, t, j] / d embedding table, where
      sequence 0 of `TOKENS` holds token s + 1 at position s, so table row s + 1 is its input
      at position s (the other sequences of the batch do not touch its logits);
    short, long: outputs on `TOKENS` and on `TOKENS` padded to 2 L.

    XLA's backend optimisations are off: they take most of the compile time of these small
    graphs and change nothing that is checked.
    """
    model = _model(attention, axis, activation)
    params = _random_params(model, TOKENS)
    long_tokens = np.pad(TOKENS, ((0, 0), (0, L)))

    def first_sequence_logits(table):
        outputs = model.apply({"params": {**params, "embedding": table}}, TOKENS)
        return jnp.sum(outputs.position_logits[0], axis=-1), outputs

    @functools.partial(jax.jit, compiler_options={"xla_backend_optimization_level": 0})
    def compute(params):
        jacobian, short = jax.jacrev(first_sequence_logits, has_aux=True)(params["embedding"])
        return jacobian, short, model.apply({"params": params}, long_tokens)

    return jax.tree.map(np.asarray, compute(params))


@pytest.mark.parametrize("attention,axis,activation", CASES, ids=CASE_IDS)
def test_output_shapes(attention, axis, activation):
    model = _model(attention, axis, activation)
    outputs = jax.eval_shape(lambda: model.apply({"params": _random_params(model, TOKENS)}, TOKENS))
    expected = {"scores": (4, J), "position_logits": (4, L, J), "embeddings": (4, L, SMALL["embed_dim"])}
    if attention.startswith("dot"):
        expected["head_attention"] = (4, 8 if attention == "dot8" else 1, L, L)
    elif attention != "none":
        expected["elementwise_attention"] = (4, L, SMALL["filters"])
    shapes = {name: jax.ShapeDtypeStruct(shape, jnp.float32) for name, shape in expected.items()}
    chex.assert_trees_all_equal_shapes(outputs, ModelOutput(**shapes))


@pytest.mark.parametrize("attention,axis,activation", CASES, ids=CASE_IDS)
def test_position_logits_are_causal_exactly_when_is_causal_says(attention, axis, activation):
    jacobian = np.abs(_run(attention, axis, activation)[0]).sum(-1)  # [t, token row]
    assert np.all(np.isfinite(jacobian))
    by_position = jacobian[:, 1:]  # [t, s]: row s + 1 is the input at position s
    future = by_position[np.triu_indices(L, k=1)]
    if is_causal(attention, axis):
        np.testing.assert_array_equal(future, 0)
        assert np.all(np.diagonal(by_position) > 0), "every position reads its own input"
    else:
        assert np.any(future > 0), "a non-causal variant should read future positions"
    # The PAD row is never read.
    np.testing.assert_array_equal(jacobian[:, 0], 0)


@pytest.mark.parametrize("attention,axis,activation", CASES, ids=CASE_IDS)
def test_scores_do_not_depend_on_padding_length(attention, axis, activation):
    _, short, long = _run(attention, axis, activation)
    np.testing.assert_allclose(short.scores, long.scores, rtol=1e-5, atol=1e-5)
    # Scores are the maximum over the valid positions; zero (finite) without any.
    for b, n in enumerate(LENGTHS):
        expected = short.position_logits[b, :n].max(0) if n else np.zeros(J)
        np.testing.assert_allclose(short.scores[b], expected, rtol=1e-6)
    for outputs in (short, long):
        assert all(np.all(np.isfinite(v)) for v in jax.tree.leaves(outputs))


def test_any_length_and_dropout():
    model = DilatedFCN(L + 1, J, dropout_rate=0.5, **SMALL)
    params = _random_params(model, TOKENS)
    for length in (1, 13):
        tokens = jnp.ones((2, length), jnp.int32)
        outputs = jax.eval_shape(
            lambda t: model.apply({"params": params}, t, train=True, rngs={"dropout": jax.random.key(0)}), tokens
        )
        chex.assert_shape(outputs.position_logits, (2, length, J))


def test_default_configuration_and_receptive_field():
    model = DilatedFCN(100, 20)
    assert model.dilations == tuple(2**layer for layer in range(9))
    shapes = jax.eval_shape(model.init, jax.random.key(0), TOKENS)["params"]
    chex.assert_shape(shapes["residual_conv_kernel"], (9, 7, 128, 128))
    chex.assert_shape(shapes["input_kernel"], (3, 16, 128))


def test_is_causal():
    assert is_causal("none", "time")
    assert is_causal("local8", "channels") and is_causal("simplified", "channels")
    assert not is_causal("dot", "channels") and not is_causal("dot8", "channels")
    assert not is_causal("simplified8", "time") and not is_causal("local", "time")
    assert set(get_args(DilatedFCNAttention)) == {"none", "dot", "dot8", "simplified", "local", "simplified8", "local8"}


def test_unknown_settings_raise():
    with pytest.raises(ValueError, match="attention must be one of"):
        DilatedFCN(10, J, attention="additive")
    with pytest.raises(ValueError, match="attention_axis must be one of"):
        DilatedFCN(10, J, attention="local", attention_axis="heads")
    with pytest.raises(ValueError, match="activation must be one of"):
        DilatedFCN(10, J, activation="tanh")
    with pytest.raises(ValueError, match="divisible by 8"):
        DilatedFCN(10, J, attention="dot8", filters=12)
    with pytest.raises(ValueError, match="attention must be one of"):
        is_causal("multihead", "channels")


def test_parameter_gradients_are_finite_with_an_all_padding_row():
    model = _model("dot8", "channels", "none")
    params = _random_params(model, TOKENS)

    def loss(params):
        return jnp.sum(jnp.square(model.apply({"params": params}, TOKENS).scores))

    grads = jax.jit(jax.grad(loss), compiler_options={"xla_backend_optimization_level": 0})(params)
    assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))


@pytest.mark.parametrize("attention,axis", [("simplified", "channels"), ("local8", "channels"), ("local", "time")])
def test_uniform_gain_passes_a_uniform_attention_through(attention, axis):
    """With a zero attention kernel and bias the weights are uniform (1/(C/G) per channel, or
    1/length per position): gain "one" shrinks the features fed to the head by that weight,
    gain "uniform" feeds them on as `none` does."""
    plain = _model("none", "channels", "none")
    params = _random_params(plain, TOKENS)
    head_inputs = {}
    for gain in ("one", "uniform"):
        model = DilatedFCN(L + 1, J, attention=attention, attention_axis=axis, attention_gain=gain, **SMALL)
        shapes = jax.eval_shape(model.init, jax.random.key(0), TOKENS)["params"]
        full = {**params, "attention_kernel": np.zeros(shapes["attention_kernel"].shape, np.float32),
                "attention_bias": np.zeros(shapes["attention_bias"].shape, np.float32)}
        # The head is linear: zero bias, and the position logits are the head kernel times its input.
        full["head_bias"] = np.zeros(J, np.float32)
        head_inputs[gain] = np.asarray(model.apply({"params": full}, TOKENS).position_logits)
    plain_params = {**params, "head_bias": np.zeros(J, np.float32)}
    expected = np.asarray(plain.apply({"params": plain_params}, TOKENS).position_logits)
    valid = TOKENS > 0
    np.testing.assert_allclose(head_inputs["uniform"][valid], expected[valid], rtol=1e-5, atol=1e-6)
    if axis == "channels":
        group = SMALL["filters"] // (8 if attention.endswith("8") else 1)
        np.testing.assert_allclose(head_inputs["one"][valid], expected[valid] / group, rtol=1e-5, atol=1e-6)
    else:
        lengths = np.broadcast_to(LENGTHS[:, None, None], expected.shape)[valid]
        np.testing.assert_allclose(head_inputs["one"][valid], expected[valid] / lengths, rtol=1e-5, atol=1e-6)


def test_unknown_gain_raises():
    with pytest.raises(ValueError, match="attention_gain must be one of"):
        DilatedFCN(10, J, attention="simplified", attention_gain="double")


@pytest.mark.parametrize("attention", ["dot", "dot8"])
def test_attention_residual_adds_the_block_to_its_input(attention):
    """a = h + Attention(h): the head's input is the `none` network's plus the block's output,
    so the position logits (linear head, zero bias) are the sum of the two networks' (the
    attention with the same parameters, without the residual)."""
    plain = _model("none", "channels", "none")
    params = {**_random_params(plain, TOKENS), "head_bias": np.zeros(J, np.float32)}
    attended = _model(attention, "channels", "none")
    full = {**_random_params(attended, TOKENS, seed=1), **params}
    residual = DilatedFCN(L + 1, J, attention=attention, attention_residual=True, **SMALL)
    logits = {name: np.asarray(model.apply({"params": p}, TOKENS).position_logits)
              for name, model, p in [("none", plain, params), ("block", attended, full), ("both", residual, full)]}
    valid = TOKENS > 0
    np.testing.assert_allclose(logits["both"][valid], (logits["none"] + logits["block"])[valid], rtol=1e-5, atol=1e-5)
