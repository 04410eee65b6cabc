"""Tests for jcaps.ops.attention against NumPy loops and padding invariants."""
import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.ops.attention import head_query_attention, masked_softmax


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


def _np_head_query_attention(queries, keys, values, mask, scale):
  """keys [B, M, I, N, d_q], values [B, M, I, N, d_v], mask [B, M, N], explicit loops."""
  b_size, m_size, i_size, n_size, _ = keys.shape
  pooled = np.zeros((b_size, m_size, i_size, values.shape[-1]))
  weights = np.zeros((b_size, m_size, i_size, n_size))
  for b in range(b_size):
    for m in range(m_size):
      for i in range(i_size):
        logits = np.array([scale * queries[i] @ keys[b, m, i, n] for n in range(n_size)])
        weights[b, m, i] = _np_masked_softmax(logits[None], mask[b, m][None])[0]
        for n in range(n_size):
          pooled[b, m, i] += weights[b, m, i, n] * values[b, m, i, n]
  return pooled, weights


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
  got = np.asarray(jax.jit(masked_softmax)(logits, mask))
  np.testing.assert_allclose(got, _np_masked_softmax(logits, mask), rtol=1e-5, atol=1e-7)
  assert np.all(got[~mask] == 0.0)
  np.testing.assert_array_equal(got[1, 2], np.zeros(7))
  sums = got.sum(-1)
  np.testing.assert_allclose(sums[mask.any(-1)], 1.0, rtol=1e-5)


def test_masked_softmax_other_axis_and_broadcast_mask():
  rng = np.random.default_rng(1)
  logits = rng.normal(size=(5, 3)).astype(np.float32)
  mask = np.array([True, True, False, True, False])[:, None]
  got = np.asarray(masked_softmax(logits, mask, axis=0))
  want = _np_masked_softmax(logits.T, np.broadcast_to(mask.T, (3, 5))).T
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


def test_masked_softmax_ignores_nonfinite_padded_logits_in_value_and_gradient():
  logits = jnp.array([[1.0, jnp.inf, 2.0, jnp.nan], [jnp.nan, -jnp.inf, 0.0, 0.0]])
  mask = jnp.array([[True, False, True, False], [False, False, False, False]])
  got = jax.jit(masked_softmax)(logits, mask)
  assert np.all(np.isfinite(got))
  np.testing.assert_allclose(got[0, [0, 2]], jax.nn.softmax(jnp.array([1.0, 2.0])), rtol=1e-6)
  np.testing.assert_array_equal(got[1], np.zeros(4))
  target = jnp.arange(8.0).reshape(2, 4)
  grad = jax.jit(jax.grad(lambda x: jnp.sum(masked_softmax(x, mask) * target)))(logits)
  assert np.all(np.isfinite(grad))
  np.testing.assert_array_equal(grad[~np.asarray(mask)], 0.0)


# --- head_query_attention --------------------------------------------------------------------


@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_head_query_attention_matches_numpy_loop(scale):
  rng = np.random.default_rng(2)
  b, m, i, n, d_q, d_v = 2, 3, 4, 6, 5, 3
  queries = rng.normal(size=(i, d_q)).astype(np.float32)
  keys = rng.normal(size=(b, m, i, n, d_q)).astype(np.float32)
  values = rng.normal(size=(b, m, i, n, d_v)).astype(np.float32)
  mask = _random_mask(rng, (b, m, n), all_padded_row=(0, 1))
  pooled, weights = jax.jit(head_query_attention)(queries, keys, values, mask, scale)
  chex.assert_shape(pooled, (b, m, i, d_v))
  chex.assert_shape(weights, (b, m, i, n))
  want_pooled, want_weights = _np_head_query_attention(queries, keys, values, mask, scale)
  np.testing.assert_allclose(weights, want_weights, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(pooled, want_pooled, rtol=1e-5, atol=1e-5)


def test_head_query_attention_padding_gets_exactly_zero_and_changes_nothing():
  rng = np.random.default_rng(3)
  i, n, d_q, d_v = 3, 5, 4, 2
  queries = rng.normal(size=(i, d_q)).astype(np.float32)
  keys = rng.normal(size=(2, i, n, d_q)).astype(np.float32)
  values = rng.normal(size=(2, i, n, d_v)).astype(np.float32)
  mask = np.array([[True, True, True, False, False], [True] * 5])
  attend = jax.jit(head_query_attention)
  pooled, weights = attend(queries, keys, values, mask)
  np.testing.assert_array_equal(weights[0, :, 3:], 0.0)
  # Whatever sits in padded slots (here huge keys and values) cannot change the result.
  keys_junk, values_junk = keys.copy(), values.copy()
  keys_junk[0, :, 3:] = 1e4
  values_junk[0, :, 3:] = -1e4
  pooled_junk, weights_junk = attend(queries, keys_junk, values_junk, mask)
  np.testing.assert_array_equal(weights_junk, weights)
  np.testing.assert_array_equal(pooled_junk, pooled)
  # Same as attending over the valid prefix only.
  pooled_short, weights_short = attend(
      queries, keys[:1, :, :3], values[:1, :, :3], mask[:1, :3]
  )
  np.testing.assert_allclose(pooled_short, pooled[:1], rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(weights_short, weights[:1, :, :3], rtol=1e-6, atol=1e-7)


def test_head_query_attention_all_padded_row_is_zero_with_finite_gradient():
  rng = np.random.default_rng(4)
  queries = jnp.asarray(rng.normal(size=(2, 3)), jnp.float32)
  keys = jnp.asarray(rng.normal(size=(2, 2, 4, 3)), jnp.float32)
  values = jnp.asarray(rng.normal(size=(2, 2, 4, 5)), jnp.float32)
  mask = jnp.array([[True, True, False, False], [False] * 4])
  pooled, weights = jax.jit(head_query_attention)(queries, keys, values, mask)
  np.testing.assert_array_equal(weights[1], 0.0)
  np.testing.assert_array_equal(pooled[1], 0.0)

  def loss(q, k, v):
    return jnp.sum(head_query_attention(q, k, v, mask)[0] ** 2)

  grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(queries, keys, values)
  for g in grads:
    assert np.all(np.isfinite(g))
  np.testing.assert_array_equal(grads[1][1], 0.0)
  np.testing.assert_array_equal(grads[2][1], 0.0)


def test_head_query_attention_vmap_matches_batched():
  rng = np.random.default_rng(5)
  queries = rng.normal(size=(3, 4)).astype(np.float32)
  keys = rng.normal(size=(4, 3, 6, 4)).astype(np.float32)
  values = rng.normal(size=(4, 3, 6, 2)).astype(np.float32)
  mask = _random_mask(rng, (4, 6))
  batched = jax.jit(head_query_attention)(queries, keys, values, mask)
  per_example = jax.vmap(head_query_attention, in_axes=(None, 0, 0, 0))
  mapped = jax.jit(per_example)(queries, keys, values, mask)
  chex.assert_trees_all_close(mapped, batched, rtol=1e-6, atol=1e-7)
