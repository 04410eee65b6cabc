"""Additive (Bahdanau) attention against a NumPy loop, padding and all-padded rows."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.ops.attention import AdditiveAttentionParams, additive_attention

B, L, DQ, DK, A = 3, 5, 4, 6, 7
LENGTHS = np.array([5, 2, 0])  # a full, a padded and an all-padded row


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    query = rng.normal(size=(B, DQ)).astype(np.float32)
    keys = rng.normal(size=(B, L, DK)).astype(np.float32)
    key_kernel = rng.normal(scale=0.5, size=(DK, A)).astype(np.float32)
    projected = keys @ key_kernel
    query_kernel = rng.normal(scale=0.5, size=(DQ, A)).astype(np.float32)
    vector = rng.normal(size=(A,)).astype(np.float32)
    mask = np.arange(L)[None, :] < LENGTHS[:, None]
    # Garbage at the pads (non-finite included) must not matter.
    keys[~mask] = np.nan
    projected[~mask] = 1e3
    return query, keys, projected, query_kernel, vector, mask


def np_additive_attention(query, keys, projected, query_kernel, vector, mask):
    """e_i = v^T tanh(W_a s + U_a h_i) over the valid i of each row, float64 loop."""
    context, weights = np.zeros((B, DK)), np.zeros((B, L))
    for b in range(B):
        n = int(mask[b].sum())
        if n == 0:
            continue
        scores = np.array([vector @ np.tanh(query[b] @ query_kernel + projected[b, i]) for i in range(n)], np.float64)
        w = np.exp(scores - scores.max())
        w /= w.sum()
        weights[b, :n] = w
        context[b] = w @ keys[b, :n].astype(np.float64)
    return context, weights


def _additive(query, keys, projected, query_kernel, vector, mask):
    """The op on the arrays of the `data` fixture, in its order."""
    return additive_attention(query, keys, projected, AdditiveAttentionParams(query_kernel, vector), mask=mask)


_attention = jax.jit(_additive)


def test_matches_numpy_loop_with_padding(data):
    context, weights = _attention(*data)
    chex.assert_shape(context, (B, DK))
    chex.assert_shape(weights, (B, L))
    expected_context, expected_weights = np_additive_attention(*data)
    np.testing.assert_allclose(weights, expected_weights, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(context, expected_context, rtol=1e-5, atol=1e-6)


def test_pads_get_exactly_zero_weight_and_all_padded_row_is_nan_free(data):
    mask = data[-1]
    context, weights = _attention(*data)
    np.testing.assert_array_equal(np.asarray(weights)[~mask], 0.0)
    np.testing.assert_allclose(np.sum(weights, axis=-1), [1.0, 1.0, 0.0], rtol=1e-6)
    np.testing.assert_array_equal(context[2], 0.0)

    def loss(query, keys, projected, query_kernel, vector, mask):
        context, weights = _additive(query, keys, projected, query_kernel, vector, mask)
        return jnp.sum(jnp.square(context)) + jnp.sum(jnp.square(weights))

    grads = jax.jit(jax.grad(loss, argnums=(0, 2, 3, 4)))(*data)
    for g in grads:
        assert np.all(np.isfinite(g))
    # The all-padded row's query gets no gradient.
    np.testing.assert_array_equal(grads[0][2], 0.0)


def test_vmap_over_an_extra_axis_matches_batched(data):
    query, keys, projected, query_kernel, vector, mask = data
    stacked = [np.stack([x, x[::-1]]) for x in (query, keys, projected, mask)]
    context, weights = jax.vmap(_additive, in_axes=(0, 0, 0, None, None, 0))(
        stacked[0], stacked[1], stacked[2], query_kernel, vector, stacked[3]
    )
    reference = _attention(query[::-1], keys[::-1], projected[::-1], query_kernel, vector, mask[::-1])
    np.testing.assert_allclose(context[1], reference[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(weights[1], reference[1], rtol=1e-6, atol=1e-6)
