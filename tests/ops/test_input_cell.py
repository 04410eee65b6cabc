"""Input-cell attention ops against float64 NumPy loops: causal softmax pooling (values, padding,
large scores, gradients, memory) and structured self-attention (the LSTM scan and the pooling
over time: test_recurrent_lstm.py, test_recurrent.py)."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.ops.attention import structured_self_attention
from jcaps.ops.pooling import causal_softmax_pool, causal_softmax_pool_quadratic

R, N = 3, 2  # hops, input features


def _mask(steps):
    """[4, steps]: a full sequence, a right-padded one, one padded at every third step (a
    leading pad, interior pads and, when steps % 3 == 1, a trailing one), a fully padded one."""
    t = np.arange(steps)
    return np.stack([t >= 0, t < (steps + 1) // 2, t % 3 != 0, t < 0])


def _pool_inputs(rng, steps, scale=1.0):
    """scores [4, steps, R], inputs [4, steps, N] float32."""
    scores = (scale * rng.normal(size=(4, steps, R))).astype(np.float32)
    inputs = rng.normal(size=(4, steps, N)).astype(np.float32)
    return scores, inputs


def _with_garbage(scores, inputs, mask):
    """Pads hold NaN scores, and NaN inputs in the odd rows, 1e3 in the even ones."""
    odd_row = np.arange(mask.shape[0])[:, None, None] % 2 == 1
    scores = np.where(mask[..., None], scores, np.nan).astype(np.float32)
    inputs = np.where(mask[..., None], inputs, np.where(odd_row, np.nan, 1e3)).astype(np.float32)
    return scores, inputs


# --- NumPy references --------------------------------------------------------------------------


def np_causal_pool(scores, inputs, mask):
    """m_t per sequence and step: softmax over the valid j <= t per hop, weighted sum, hop mean;
    zero at padded steps (float64 loops)."""
    batch, steps, num_hops = scores.shape
    out = np.zeros(inputs.shape, np.float64)
    for b in range(batch):
        for t in range(steps):
            if not mask[b, t]:
                continue
            prefix = [j for j in range(t + 1) if mask[b, j]]
            x = inputs[b, prefix].astype(np.float64)
            for k in range(num_hops):
                s = scores[b, prefix, k].astype(np.float64)
                e = np.exp(s - s.max())
                out[b, t] += (e / e.sum()) @ x / num_hops
    return out


def np_structured_self_attention(hidden, w1, w2, mask):
    """Per sequence: A = softmax over the valid t of W2^T tanh(W1^T h_t), pooled = hop mean of A H."""
    batch, steps, _ = hidden.shape
    num_hops = w2.shape[1]
    pooled = np.zeros((batch, hidden.shape[2]))
    weights = np.zeros((batch, num_hops, steps))
    for b in range(batch):
        valid = np.flatnonzero(mask[b])
        if not len(valid):
            continue
        h = hidden[b, valid].astype(np.float64)
        logits = (np.tanh(h @ w1) @ w2).T
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        weights[b][:, valid] = e / e.sum(axis=1, keepdims=True)
        pooled[b] = (weights[b][:, valid] @ h).mean(axis=0)
    return pooled, weights


# --- causal softmax pooling: values ------------------------------------------------------------


_pool = jax.jit(causal_softmax_pool)
_pool_quadratic = jax.jit(causal_softmax_pool_quadratic)


@pytest.mark.parametrize("steps", [1, 2, 7, 33])
def test_causal_pool_matches_quadratic_and_numpy_loop_with_garbage_pads(steps):
    rng = np.random.default_rng(steps)
    mask = _mask(steps)
    scores, inputs = _with_garbage(*_pool_inputs(rng, steps), mask)
    expected = np_causal_pool(scores, inputs, mask)
    streamed, quadratic = _pool(scores, inputs, mask=mask), _pool_quadratic(scores, inputs, mask=mask)
    chex.assert_shape([streamed, quadratic], (4, steps, N))
    np.testing.assert_allclose(streamed, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(quadratic, expected, rtol=1e-5, atol=1e-6)
    # Padding convention: m_t = 0 at every padded step (the fully padded row included).
    np.testing.assert_array_equal(np.asarray(streamed)[~mask], 0.0)


def test_causal_pool_without_mask_pools_every_step():
    scores, inputs = _pool_inputs(np.random.default_rng(1), 7)
    everything = np.ones((4, 7), bool)
    expected = np_causal_pool(scores, inputs, everything)
    np.testing.assert_allclose(_pool(scores, inputs), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(_pool_quadratic(scores, inputs), expected, rtol=1e-5, atol=1e-6)


def test_causal_pool_extra_padding_changes_no_valid_output():
    rng = np.random.default_rng(2)
    mask = _mask(7)
    scores, inputs = _with_garbage(*_pool_inputs(rng, 7), mask)
    longer_mask = np.concatenate([mask, np.zeros((4, 3), bool)], axis=1)
    longer_scores = np.concatenate([scores, np.full((4, 3, R), 1e4, np.float32)], axis=1)
    longer_inputs = np.concatenate([inputs, np.full((4, 3, N), np.nan, np.float32)], axis=1)
    longer = _pool(longer_scores, longer_inputs, mask=longer_mask)
    np.testing.assert_array_equal(longer[:, :7], _pool(scores, inputs, mask=mask))
    np.testing.assert_array_equal(longer[:, 7:], 0.0)


def test_causal_pool_large_scores_do_not_overflow():
    rng = np.random.default_rng(3)
    mask = _mask(33)
    scores, inputs = _pool_inputs(rng, 33)
    # +-1e4 with O(1) differences between positions: exp of any raw score overflows.
    scores = (1e4 * np.sign(scores) + scores).astype(np.float32)
    scores, inputs = _with_garbage(scores, inputs, mask)
    expected = np_causal_pool(scores, inputs, mask)
    for pooled in (_pool(scores, inputs, mask=mask), _pool_quadratic(scores, inputs, mask=mask)):
        chex.assert_tree_all_finite(pooled)
        np.testing.assert_allclose(pooled, expected, rtol=1e-4, atol=1e-5)


def test_causal_pool_under_vmap_and_jit():
    rng = np.random.default_rng(4)
    mask = np.stack([_mask(7), _mask(7)[::-1]])
    scores, inputs = (np.stack(both) for both in zip(_pool_inputs(rng, 7), _pool_inputs(rng, 7)))
    weights = rng.normal(size=inputs.shape).astype(np.float32)

    def loss(scores, inputs, mask, weights):
        return jnp.sum(weights * causal_softmax_pool(scores, inputs, mask=mask))

    grad = jax.grad(loss, argnums=(0, 1))
    pooled = jax.jit(jax.vmap(lambda s, x, m: causal_softmax_pool(s, x, mask=m)))(scores, inputs, mask)
    grads = jax.jit(jax.vmap(grad))(scores, inputs, mask, weights)
    chex.assert_shape(pooled, (2, 4, 7, N))
    for i in range(2):
        np.testing.assert_allclose(pooled[i], np_causal_pool(scores[i], inputs[i], mask[i]), rtol=1e-5, atol=1e-6)
        one = jax.jit(grad)(scores[i], inputs[i], mask[i], weights[i])
        for batched, single in zip(grads, one):
            np.testing.assert_allclose(batched[i], single, rtol=1e-5, atol=1e-6)


# --- causal softmax pooling: gradients and memory ----------------------------------------------


def _central_differences(f, value, mask, eps=1e-6):
    """df/dvalue [B, T, F] at the entries of the valid positions of mask [B, T] (0 elsewhere)."""
    grad = np.zeros_like(value)
    for idx in np.ndindex(value.shape):
        if mask[idx[:2]]:
            step = np.zeros_like(value)
            step[idx] = eps
            grad[idx] = (f(value + step) - f(value - step)) / (2 * eps)
    return grad


def test_causal_pool_gradients_match_central_differences():
    rng = np.random.default_rng(5)
    mask = _mask(5)
    with jax.enable_x64(True):
        scores = np.where(mask[..., None], 2 * rng.normal(size=(4, 5, R)), np.nan)
        inputs = np.where(mask[..., None], rng.normal(size=(4, 5, N)), np.nan)
        weights = rng.normal(size=(4, 5, N))

        @jax.jit
        def loss(scores, inputs):
            return jnp.sum(weights * jnp.tanh(causal_softmax_pool(scores, inputs, mask=mask)))

        score_grad, input_grad = jax.jit(jax.grad(loss, argnums=(0, 1)))(scores, inputs)
        numeric_scores = _central_differences(lambda s: loss(s, inputs), scores, mask)
        numeric_inputs = _central_differences(lambda x: loss(scores, x), inputs, mask)
    # Padded positions never enter: zero gradient, whatever they hold.
    np.testing.assert_array_equal(np.asarray(score_grad)[~mask], 0.0)
    np.testing.assert_array_equal(np.asarray(input_grad)[~mask], 0.0)
    np.testing.assert_allclose(np.asarray(score_grad)[mask], numeric_scores[mask], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(np.asarray(input_grad)[mask], numeric_inputs[mask], rtol=1e-6, atol=1e-9)


def test_causal_pool_gradients_match_autodiff_of_quadratic_at_large_scores():
    rng = np.random.default_rng(6)
    mask = _mask(7)
    scores, inputs = _pool_inputs(rng, 7, scale=1e4)
    weights = rng.normal(size=inputs.shape).astype(np.float32)

    def loss(pool):
        return lambda s, x: jnp.sum(weights * jnp.tanh(pool(s, x, mask=mask)))

    ours = jax.jit(jax.grad(loss(causal_softmax_pool), argnums=(0, 1)))(scores, inputs)
    reference = jax.jit(jax.grad(loss(causal_softmax_pool_quadratic), argnums=(0, 1)))(scores, inputs)
    chex.assert_tree_all_finite(ours)
    for got, expected in zip(ours, reference):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)


def _largest_intermediate(jaxpr) -> int:
    """Elements of the largest value any equation of `jaxpr` (or of a jaxpr nested in its
    parameters: scan bodies, jit calls) produces."""
    largest = 0
    for eqn in jaxpr.eqns:
        for var in eqn.outvars:
            largest = max(largest, int(np.prod(getattr(var.aval, "shape", ()))))
        for param in eqn.params.values():
            for sub in param if isinstance(param, (tuple, list)) else (param,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    largest = max(largest, _largest_intermediate(inner))
    return largest


def test_causal_pool_value_and_gradient_hold_no_per_step_carry():
    """Neither the value nor the gradient forms a [T, B, r, N] array (a carry per step)."""
    batch, steps, num_hops, features = 2, 16, 3, 5
    scores = jnp.zeros((batch, steps, num_hops))
    inputs = jnp.zeros((batch, steps, features))
    mask = jnp.ones((batch, steps), bool)

    def value_and_grad(pool):
        return jax.value_and_grad(lambda s, x: jnp.sum(jnp.sin(pool(s, x, mask=mask))), argnums=(0, 1))

    per_step_carries = batch * steps * num_hops * features
    ours = _largest_intermediate(jax.make_jaxpr(value_and_grad(causal_softmax_pool))(scores, inputs).jaxpr)
    assert ours <= batch * steps * max(num_hops, features) < per_step_carries
    # The check sees inside the transformations: the quadratic version's [B, r, T, T] shows.
    quadratic = jax.make_jaxpr(value_and_grad(causal_softmax_pool_quadratic))(scores, inputs).jaxpr
    assert _largest_intermediate(quadratic) >= batch * num_hops * steps * steps


# --- structured self-attention -----------------------------------------------------------------


def test_structured_self_attention_matches_numpy_with_padding():
    rng = np.random.default_rng(10)
    batch, steps, hidden_dim, attention_dim, num_hops = 4, 6, 3, 5, 2
    hidden = rng.normal(size=(batch, steps, hidden_dim)).astype(np.float32)
    w1 = rng.normal(size=(hidden_dim, attention_dim)).astype(np.float32)
    w2 = rng.normal(size=(attention_dim, num_hops)).astype(np.float32)
    mask = _mask(steps)
    hidden[~mask] = np.nan
    pooled, weights = jax.jit(structured_self_attention)(hidden, w1, w2, mask=mask)
    chex.assert_shape([pooled, weights], [(batch, hidden_dim), (batch, num_hops, steps)])
    expected_pooled, expected_weights = np_structured_self_attention(hidden, w1, w2, mask)
    np.testing.assert_allclose(pooled, expected_pooled, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(weights, expected_weights, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.sum(weights, axis=-1), mask.any(axis=1)[:, None] * np.ones(num_hops), rtol=1e-6)
