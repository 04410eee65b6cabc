"""Tests for jcaps.ops.attention against NumPy loops and padding invariants."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.ops.attention import HeadQueryAttentionParams, head_query_attention, masked_softmax


def _np_masked_softmax(logits, mask):
    """Row-wise over the last axis, loops over rows; all-padded rows give zeros."""
    out = np.zeros_like(logits, dtype=np.float64)
    for idx in np.ndindex(*logits.shape[:-1]):
        valid = mask[idx].astype(bool)
        if valid.any():
            x = logits[idx][valid].astype(np.float64)
            e = np.exp(x - x.max())
            out[idx][valid] = e / e.sum()
    return out


def _np_head_query_attention(queries, key_kernel, value_kernel, inputs, mask, scale):
    """inputs [B, M, N, d_in] (or [B, M, I, N, d_in] per head), mask [B, M, N]; explicit loops
    over the keys k[i, n] = Wk_i x_n and values v[i, n] = Wv_i x_n of the paper's form."""
    i_size = queries.shape[0]
    b_size, m_size, n_size = mask.shape
    pooled = np.zeros((b_size, m_size, i_size, value_kernel.shape[-1]))
    weights = np.zeros((b_size, m_size, i_size, n_size))
    for b in range(b_size):
        for m in range(m_size):
            for i in range(i_size):
                x = inputs[b, m, i] if inputs.ndim == 5 else inputs[b, m]
                keys = [key_kernel[i].T @ x[n] for n in range(n_size)]
                values = [value_kernel[i].T @ x[n] for n in range(n_size)]
                logits = np.array([scale * queries[i] @ keys[n] for n in range(n_size)])
                weights[b, m, i] = _np_masked_softmax(logits[None], mask[b, m][None])[0]
                for n in range(n_size):
                    pooled[b, m, i] += weights[b, m, i, n] * values[n]
    return pooled, weights


def _attention_params(rng, i, d_in, d_q, d_v):
    return HeadQueryAttentionParams(
        rng.normal(size=(i, d_q)).astype(np.float32),
        rng.normal(size=(i, d_in, d_q)).astype(np.float32) / np.sqrt(d_in),
        rng.normal(size=(i, d_in, d_v)).astype(np.float32),
    )


def _random_mask(rng, shape, all_padded_row=None):
    """Prefix masks of random lengths >= 1; optionally one row fully padded."""
    lengths = rng.integers(1, shape[-1] + 1, size=shape[:-1])
    mask = np.arange(shape[-1]) < lengths[..., None]
    if all_padded_row is not None:
        mask[all_padded_row] = False
    return mask


# --- masked_softmax --------------------------------------------------------------------------


def test_masked_softmax_matches_numpy_and_zeroes_pads():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 4, 7)).astype(np.float32) * 3
    mask = _random_mask(rng, (3, 4, 7), all_padded_row=(1, 2))
    got = np.asarray(jax.jit(masked_softmax)(logits, mask=mask))
    np.testing.assert_allclose(got, _np_masked_softmax(logits, mask), rtol=1e-5, atol=1e-7)
    assert np.all(got[~mask] == 0.0)
    np.testing.assert_array_equal(got[1, 2], np.zeros(7))
    sums = got.sum(-1)
    np.testing.assert_allclose(sums[mask.any(-1)], 1.0, rtol=1e-5)


def test_masked_softmax_other_axis_and_broadcast_mask():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(5, 3)).astype(np.float32)
    mask = np.array([True, True, False, True, False])[:, None]
    got = np.asarray(masked_softmax(logits, mask=mask, axis=0))
    want = _np_masked_softmax(logits.T, np.broadcast_to(mask.T, (3, 5))).T
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_masked_softmax_ignores_nonfinite_padded_logits_in_value_and_gradient():
    logits = jnp.array([[1.0, jnp.inf, 2.0, jnp.nan], [jnp.nan, -jnp.inf, 0.0, 0.0]])
    mask = jnp.array([[True, False, True, False], [False, False, False, False]])
    got = jax.jit(masked_softmax)(logits, mask=mask)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got[0, [0, 2]], jax.nn.softmax(jnp.array([1.0, 2.0])), rtol=1e-6)
    np.testing.assert_array_equal(got[1], np.zeros(4))
    target = jnp.arange(8.0).reshape(2, 4)
    grad = jax.jit(jax.grad(lambda x: jnp.sum(masked_softmax(x, mask=mask) * target)))(logits)
    assert np.all(np.isfinite(grad))
    np.testing.assert_array_equal(grad[~np.asarray(mask)], 0.0)


# --- head_query_attention --------------------------------------------------------------------


@pytest.mark.parametrize("per_head", [False, True])
@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_head_query_attention_matches_numpy_loop(scale, per_head):
    rng = np.random.default_rng(2)
    b, m, i, n, d_in, d_q, d_v = 2, 3, 4, 6, 7, 5, 3
    params = _attention_params(rng, i, d_in, d_q, d_v)
    shape = (b, m, i, n, d_in) if per_head else (b, m, n, d_in)
    inputs = rng.normal(size=shape).astype(np.float32)
    mask = _random_mask(rng, (b, m, n), all_padded_row=(0, 1))
    pooled, weights = jax.jit(head_query_attention, static_argnames="scale")(inputs, params, mask=mask, scale=scale)
    chex.assert_shape(pooled, (b, m, i, d_v))
    chex.assert_shape(weights, (b, m, i, n))
    want_pooled, want_weights = _np_head_query_attention(*params, inputs, mask, scale)
    np.testing.assert_allclose(weights, want_weights, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(pooled, want_pooled, rtol=1e-5, atol=1e-5)


def test_head_query_attention_padding_gets_exactly_zero_and_changes_nothing():
    rng = np.random.default_rng(3)
    i, n, d_in, d_q, d_v = 3, 5, 6, 4, 2
    params = _attention_params(rng, i, d_in, d_q, d_v)
    inputs = rng.normal(size=(2, n, d_in)).astype(np.float32)
    mask = np.array([[True, True, True, False, False], [True] * 5])
    attend = jax.jit(head_query_attention)
    pooled, weights = attend(inputs, params, mask=mask)
    np.testing.assert_array_equal(weights[0, :, 3:], 0.0)
    # Whatever sits in padded slots (here huge inputs) cannot change the result.
    junk = inputs.copy()
    junk[0, 3:] = 1e4
    pooled_junk, weights_junk = attend(junk, params, mask=mask)
    np.testing.assert_array_equal(weights_junk, weights)
    np.testing.assert_array_equal(pooled_junk, pooled)
    # Same as attending over the valid prefix only.
    pooled_short, weights_short = attend(inputs[:1, :3], params, mask=mask[:1, :3])
    np.testing.assert_allclose(pooled_short, pooled[:1], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(weights_short, weights[:1, :, :3], rtol=1e-6, atol=1e-7)


def test_head_query_attention_all_padded_row_is_zero_with_finite_gradient():
    rng = np.random.default_rng(4)
    params = HeadQueryAttentionParams(*map(jnp.asarray, _attention_params(rng, 2, 3, 3, 5)))
    inputs = jnp.asarray(rng.normal(size=(2, 4, 3)), jnp.float32)
    mask = jnp.array([[True, True, False, False], [False] * 4])
    pooled, weights = jax.jit(head_query_attention)(inputs, params, mask=mask)
    np.testing.assert_array_equal(weights[1], 0.0)
    np.testing.assert_array_equal(pooled[1], 0.0)

    def loss(x, params):
        return jnp.sum(head_query_attention(x, params, mask=mask)[0] ** 2)

    input_grads, param_grads = jax.jit(jax.grad(loss, argnums=(0, 1)))(inputs, params)
    grads = (param_grads.queries, input_grads, param_grads.key_kernel, param_grads.value_kernel)
    for g in grads:
        assert np.all(np.isfinite(g))
    np.testing.assert_array_equal(grads[1][1], 0.0)
    np.testing.assert_array_equal(grads[1][0, 2:], 0.0)


def test_head_query_attention_vmap_matches_batched():
    rng = np.random.default_rng(5)
    params = _attention_params(rng, 3, 5, 4, 2)
    inputs = rng.normal(size=(4, 6, 5)).astype(np.float32)
    mask = _random_mask(rng, (4, 6))
    batched = jax.jit(head_query_attention)(inputs, params, mask=mask)
    per_example = jax.vmap(lambda x, mask: head_query_attention(x, params, mask=mask))
    mapped = jax.jit(per_example)(inputs, mask)
    chex.assert_trees_all_close(mapped, batched, rtol=1e-6, atol=1e-6)
