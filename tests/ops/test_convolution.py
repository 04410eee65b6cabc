"""Causal convolutions and the dilated residual stack against NumPy loops; the receptive field
by gradients; the masked max pool the network reads them with."""

from typing import get_args

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.ops import convolution
from jcaps.ops.pooling import masked_max_over_time

B, L, C = 2, 11, 4


def _normal(rng, *shape, scale=0.5):
    return (scale * rng.normal(size=shape)).astype(np.float32)


def _layer(rng, channels, width, activation):
    """A residual layer's arrays, as the dict `dilated_residual_stack` reads."""
    outputs = 2 * channels if activation == "gated" else channels
    return {
        "conv_kernel": _normal(rng, width, channels, outputs),
        "conv_bias": _normal(rng, outputs),
        "projection_kernel": _normal(rng, channels, channels),
        "projection_bias": _normal(rng, channels),
    }


# --- NumPy reference ---------------------------------------------------------------------------


def np_causal_conv(x, kernel, bias, dilation):
    """y[b, t] = bias + sum_k x[b, t - (W-1-k) dilation] @ kernel[k], taps before 0 skipped."""
    x, kernel = np.asarray(x, np.float64), np.asarray(kernel, np.float64)
    width = kernel.shape[0]
    y = np.zeros(x.shape[:2] + kernel.shape[-1:])
    for b in range(x.shape[0]):
        for t in range(x.shape[1]):
            y[b, t] = 0 if bias is None else bias
            for k in range(width):
                source = t - (width - 1 - k) * dilation
                if source >= 0:
                    y[b, t] += x[b, source] @ kernel[k]
    return y


def np_residual_layer(x, layer, dilation, activation):
    conv = np_causal_conv(x, layer["conv_kernel"], layer["conv_bias"], dilation)
    if activation == "relu":
        d = np.maximum(conv, 0)
    elif activation == "gated":
        half = conv.shape[-1] // 2
        d = np.tanh(conv[..., :half]) / (1 + np.exp(-conv[..., half:]))
    else:
        d = conv
    projected = np.asarray(x, np.float64) @ layer["projection_kernel"] + layer["projection_bias"]
    return d + projected, d


def np_stack(x, layers, dilations, activation):
    total = 0
    for layer, dilation in zip(layers, dilations):
        x, skip = np_residual_layer(x, layer, dilation, activation)
        total = total + skip
    return np.maximum(total, 0)


# --- causal conv, residual layer, stack --------------------------------------------------------


@pytest.mark.parametrize("width,dilation,with_bias", [(3, 1, True), (7, 2, True), (2, 4, False), (1, 1, True)])
def test_causal_conv1d_matches_numpy_loop(width, dilation, with_bias):
    rng = np.random.default_rng(width * 10 + dilation)
    x, kernel, bias = _normal(rng, B, L, 3), _normal(rng, width, 3, 5), _normal(rng, 5)
    bias = bias if with_bias else None
    y = convolution.causal_conv1d(x, kernel, bias=bias, dilation=dilation)
    chex.assert_shape(y, (B, L, 5))
    np.testing.assert_allclose(y, np_causal_conv(x, kernel, bias, dilation), rtol=1e-5, atol=1e-5)


def test_grouped_causal_conv1d_is_block_diagonal():
    rng = np.random.default_rng(1)
    x, kernel = _normal(rng, B, L, 4), _normal(rng, 3, 2, 6)
    y = convolution.causal_conv1d(x, kernel, dilation=2, groups=2)
    expected = np.concatenate(
        [np_causal_conv(x[..., :2], kernel[..., :3], None, 2), np_causal_conv(x[..., 2:], kernel[..., 3:], None, 2)], -1
    )
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("activation", get_args(convolution.Activation))
def test_residual_layer_matches_numpy_loop(activation):
    rng = np.random.default_rng(2)
    x, layer = _normal(rng, B, L, C), _layer(rng, C, 3, activation)
    x_next, skip = convolution.residual_layer(x, **layer, dilation=2, activation=activation)
    expected_next, expected_skip = np_residual_layer(x, layer, 2, activation)
    chex.assert_shape([x_next, skip], (B, L, C))
    np.testing.assert_allclose(x_next, expected_next, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(skip, expected_skip, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("activation", get_args(convolution.Activation))
def test_dilated_residual_stack_matches_numpy_composition(activation):
    rng = np.random.default_rng(3)
    dilations = (1, 2, 4)
    x = _normal(rng, B, L, C)
    layers = [_layer(rng, C, 3, activation) for _ in dilations]
    expected = np_stack(x, layers, dilations, activation)
    y = convolution.dilated_residual_stack(x, layers, dilations=dilations, activation=activation)
    chex.assert_shape(y, (B, L, C))
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    # Layers as tuples in `LAYER_KEYS` order give the same.
    as_tuples = [tuple(layer[key] for key in convolution.LAYER_KEYS) for layer in layers]
    np.testing.assert_allclose(convolution.dilated_residual_stack(x, as_tuples, dilations=dilations, activation=activation), y)


def test_invalid_arguments_raise():
    rng = np.random.default_rng(4)
    x, layer = _normal(rng, B, L, C), _layer(rng, C, 3, "none")
    with pytest.raises(ValueError, match="activation must be one of"):
        convolution.residual_layer(x, **layer, dilation=1, activation="tanh")
    with pytest.raises(ValueError, match="activation must be one of"):
        convolution.dilated_residual_stack(x, [layer], dilations=(1,), activation="swish")
    with pytest.raises(ValueError, match="dilations"):
        convolution.dilated_residual_stack(x, [layer], dilations=(1, 2), activation="none")
    odd = dict(layer, conv_kernel=_normal(rng, 3, C, 3), conv_bias=_normal(rng, 3))
    with pytest.raises(ValueError, match="even number"):
        convolution.residual_layer(x, **odd, dilation=1, activation="gated")


# --- receptive field ---------------------------------------------------------------------------


DILATIONS = tuple(2**layer for layer in range(9))


def test_receptive_field_of_the_network():
    assert convolution.receptive_field(3, 7, DILATIONS) == 3 + 6 * (2**9 - 1) == 3069


def test_stack_output_sees_exactly_its_receptive_field():
    """Output t of first conv (width 3) + 9 layers (width 7, dilations 1..256) depends on
    inputs t - 3068 .. t: nonzero gradient at t - 3068, exactly zero at t - 3069 and after t."""
    rng = np.random.default_rng(5)
    channels, length, t = 2, 3200, 3150
    first_kernel = _normal(rng, 3, channels, channels)
    layers = [_layer(rng, channels, 7, "none") for _ in DILATIONS]
    # A large last skip bias keeps the final ReLU active at t (a dead ReLU would zero every
    # gradient and prove nothing).
    layers[-1]["conv_bias"] = np.full(channels, 100.0, np.float32)

    def output_at_t(x):
        hidden = convolution.causal_conv1d(x, first_kernel)
        return jnp.sum(convolution.dilated_residual_stack(hidden, layers, dilations=DILATIONS)[0, t])

    x = _normal(rng, 1, length, channels)
    grad = np.abs(np.asarray(jax.jit(jax.grad(output_at_t))(x))[0]).sum(-1)
    field = convolution.receptive_field(3, 7, DILATIONS)
    assert grad[t - field + 1] > 0
    assert grad[t] > 0
    np.testing.assert_array_equal(grad[: t - field + 1], 0)
    np.testing.assert_array_equal(grad[t + 1 :], 0)


# --- masked max pool (`jcaps.ops.pooling.masked_max_over_time`) ---------------------------------


def test_masked_max_pool_ignores_padding_and_is_finite_without_valid_positions():
    rng = np.random.default_rng(6)
    logits = _normal(rng, 3, 5, 2)  # [B, L, J]
    mask = np.arange(5)[None, :] < np.array([5, 2, 0])[:, None]
    logits[~mask] = 1e30  # padding holds a huge value

    def pool(z):
        return masked_max_over_time(z, mask=mask)

    pooled, grad = jax.jit(lambda z: (pool(z), jax.grad(lambda z: jnp.sum(pool(z)))(z)))(logits)
    chex.assert_shape(pooled, (3, 2))
    np.testing.assert_array_equal(pooled[0], logits[0].max(0))
    np.testing.assert_array_equal(pooled[1], logits[1, :2].max(0))
    np.testing.assert_array_equal(pooled[2], 0)  # no valid position: zero, not -inf
    assert np.all(np.isfinite(grad))
    np.testing.assert_array_equal(np.asarray(grad)[~mask], 0)
