"""The convolutional-network attention variants (simplified, local, dot-product) against NumPy
loops on a padded batch; padded positions get zero weight; no NaN without valid positions."""

import functools
from typing import get_args

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.ops import attention

B, L, C = 3, 6, 4
LENGTHS = np.array([6, 3, 0])  # a full, a padded and an all-padding sequence
MASK = np.arange(L)[None, :] < LENGTHS[:, None]

# Jitted: one compilation per configuration instead of one per primitive; XLA's backend
# optimisations, most of the compile time of such small graphs, are off.
_jit = functools.partial(jax.jit, compiler_options={"xla_backend_optimization_level": 0})
_simplified = _jit(attention.simplified_attention, static_argnames=("groups", "axis"))
_local = _jit(attention.local_attention, static_argnames=("groups", "axis"))
_dot = _jit(attention.dot_product_attention, static_argnames=("num_heads",))


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(B, L, C)).astype(np.float32)
    mask = MASK
    # Padding may hold anything; it must never reach a valid output.
    x[~mask] = np.nan
    x[1, 4] = 1e4
    return x, mask


def _params(rng, *shapes):
    return tuple(rng.normal(scale=0.7, size=s).astype(np.float32) for s in shapes)


# --- NumPy reference ---------------------------------------------------------------------------


def _softmax(v):
    e = np.exp(v - v.max())
    return e / e.sum()


def np_gate(x, scores, mask, groups, axis):
    """weights = softmax of the scores [B, L, C] per (position, group) or per channel over the
    valid positions; zeros at padded positions."""
    size = C // groups
    weights = np.zeros_like(scores)
    for b in range(B):
        n = int(mask[b].sum())
        if axis == "channels":
            for t in range(n):
                for g in range(groups):
                    weights[b, t, g * size : (g + 1) * size] = _softmax(scores[b, t, g * size : (g + 1) * size])
        elif n:
            for c in range(C):
                weights[b, :n, c] = _softmax(scores[b, :n, c])
    x = np.where(mask[..., None], x, 0)
    return weights * x, weights


def np_simplified_scores(x, kernel, bias, groups):
    size = C // groups
    scores = np.zeros((B, L, C))
    for b in range(B):
        for t in range(L):
            for g in range(groups):
                block = slice(g * size, (g + 1) * size)
                scores[b, t, block] = x[b, t, block] @ kernel[g] + bias[g]
    return scores


def np_local_scores(x, kernel, bias, groups, mask):
    """Width-W conv per group, taps t-W+1..t (taps before 0 skipped); x zero at padding."""
    x = np.where(mask[..., None], x, 0).astype(np.float64)
    size, width = C // groups, kernel.shape[1]
    scores = np.zeros((B, L, C))
    for b in range(B):
        for t in range(L):
            for g in range(groups):
                block = slice(g * size, (g + 1) * size)
                scores[b, t, block] = bias[g]
                for k in range(width):
                    source = t - (width - 1 - k)
                    if source >= 0:
                        scores[b, t, block] += x[b, source, block] @ kernel[g, k]
    return scores


def np_dot_product(x, wq, wk, wv, wo, mask, heads):
    size = wq.shape[1] // heads
    y = np.zeros((B, L, wo.shape[1]))
    weights = np.zeros((B, heads, L, L))
    for b in range(B):
        n = int(mask[b].sum())
        xb = np.asarray(x[b, :n], np.float64)
        q, k, v = xb @ wq, xb @ wk, xb @ wv
        outputs = []
        for h in range(heads):
            block = slice(h * size, (h + 1) * size)
            for t in range(n):
                weights[b, h, t, :n] = _softmax(q[t, block] @ k[:, block].T / np.sqrt(size))
            outputs.append(weights[b, h, :n, :n] @ v[:, block])
        if n:
            y[b, :n] = np.concatenate(outputs, axis=-1) @ wo
    return y, weights


# --- tests -------------------------------------------------------------------------------------


def _check(y, weights, expected_y, expected_weights, mask):
    assert np.all(np.isfinite(y)) and np.all(np.isfinite(weights))
    np.testing.assert_allclose(y, expected_y, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(weights, expected_weights, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(y)[~mask], 0)


@pytest.mark.parametrize("axis", get_args(attention.ConvAttentionAxis))
@pytest.mark.parametrize("groups", [1, 2])
def test_simplified_attention_matches_numpy(data, groups, axis):
    x, mask = data
    kernel, bias = _params(np.random.default_rng(groups), (groups, C // groups, C // groups), (groups, C // groups))
    y, weights = _simplified(x, kernel, bias=bias, mask=mask, groups=groups, axis=axis)
    chex.assert_shape([y, weights], (B, L, C))
    scores = np_simplified_scores(np.where(mask[..., None], x, 0), kernel, bias, groups)
    _check(y, weights, *np_gate(x, scores, mask, groups, axis), mask)
    np.testing.assert_array_equal(np.asarray(weights)[~mask], 0)


@pytest.mark.parametrize("axis", get_args(attention.ConvAttentionAxis))
@pytest.mark.parametrize("groups", [1, 2])
def test_local_attention_matches_numpy(data, groups, axis):
    x, mask = data
    shapes = (groups, 3, C // groups, C // groups), (groups, C // groups)
    kernel, bias = _params(np.random.default_rng(10 + groups), *shapes)
    y, weights = _local(x, kernel, bias=bias, mask=mask, groups=groups, axis=axis)
    chex.assert_shape([y, weights], (B, L, C))
    scores = np_local_scores(x, kernel, bias, groups, mask)
    _check(y, weights, *np_gate(x, scores, mask, groups, axis), mask)
    np.testing.assert_array_equal(np.asarray(weights)[~mask], 0)


@pytest.mark.parametrize("heads", [1, 2])
def test_dot_product_attention_matches_numpy(data, heads):
    x, mask = data
    kernels = _params(np.random.default_rng(20 + heads), (C, C), (C, C), (C, C), (C, C))
    y, weights = _dot(x, attention.DotProductAttentionParams(*kernels), mask=mask, num_heads=heads)
    chex.assert_shape(y, (B, L, C))
    chex.assert_shape(weights, (B, heads, L, L))
    _check(y, weights, *np_dot_product(x, *kernels, mask, heads), mask)
    # Padded keys and padded queries get zero weight.
    np.testing.assert_array_equal(np.asarray(weights).transpose(0, 3, 1, 2)[~mask], 0)
    np.testing.assert_array_equal(np.asarray(weights).transpose(0, 2, 1, 3)[~mask], 0)


def _variants():
    """(name, fn(x, params) -> (y, weights), parameter shapes) for every variant."""
    g = 2
    return [
        *(
            (
                f"simplified-{axis}",
                lambda x, p, axis=axis: attention.simplified_attention(x, p[0], bias=p[1], mask=MASK, groups=g, axis=axis),
                [(g, C // g, C // g), (g, C // g)],
            )
            for axis in get_args(attention.ConvAttentionAxis)
        ),
        *(
            (
                f"local-{axis}",
                lambda x, p, axis=axis: attention.local_attention(x, p[0], bias=p[1], mask=MASK, groups=g, axis=axis),
                [(g, 3, C // g, C // g), (g, C // g)],
            )
            for axis in get_args(attention.ConvAttentionAxis)
        ),
        ("dot", lambda x, p: attention.dot_product_attention(x, attention.DotProductAttentionParams(*p), mask=MASK, num_heads=g), [(C, C)] * 4),
    ]


@pytest.mark.parametrize("name,fn,shapes", _variants(), ids=[v[0] for v in _variants()])
def test_no_nan_in_value_or_gradient_for_all_padding_row(data, name, fn, shapes):
    x, _ = data
    params = _params(np.random.default_rng(30), *shapes)

    def loss(x, params):
        y, weights = fn(x, params)
        return jnp.sum(jnp.square(y)) + jnp.sum(weights)

    (y, weights), (x_grad, param_grads) = _jit(lambda x, p: (fn(x, p), jax.grad(loss, argnums=(0, 1))(x, p)))(x, params)
    for array in (y, weights, x_grad, *param_grads):
        assert np.all(np.isfinite(array)), name
    # The all-padding row: zero outputs, zero weights, zero gradient.
    np.testing.assert_array_equal(y[2], 0)
    np.testing.assert_array_equal(weights[2], 0)
    np.testing.assert_array_equal(np.asarray(x_grad)[~MASK], 0)


def test_invalid_arguments_raise(data):
    x, mask = data
    with pytest.raises(ValueError, match="axis must be one of"):
        attention.simplified_attention(x, np.zeros((1, C, C)), mask=mask, axis="heads")
    with pytest.raises(ValueError, match="groups must be a positive divisor"):
        attention.simplified_attention(x, np.zeros((3, 1, 1)), mask=mask, groups=3)
    with pytest.raises(ValueError, match="kernel must have shape"):
        attention.local_attention(x, np.zeros((2, 3, C, C)), mask=mask, groups=2)
    with pytest.raises(ValueError, match="num_heads"):
        attention.dot_product_attention(
            x, attention.DotProductAttentionParams(*[np.zeros((C, C))] * 4), mask=mask, num_heads=3
        )
