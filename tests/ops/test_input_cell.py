"""Input-cell attention ops against float64 NumPy loops: causal softmax pooling (values, padding,
large scores, gradients, memory), the LSTM scan, last-state and max pooling, structured
self-attention."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.ops import recurrent
from jcaps.ops.attention import causal_softmax_pool, causal_softmax_pool_quadratic, structured_self_attention

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


def _sigmoid(a):
    return 1 / (1 + np.exp(-a))


def np_lstm(gates, w_h, b_h):
    """PyTorch nn.LSTM from input gates [n, 4H] (x W_i + b_i), gate order (i, f, g, o), one
    sequence: -> [n, H] (float64 loop)."""
    hidden = w_h.shape[0]
    h, c = np.zeros(hidden), np.zeros(hidden)
    outputs = []
    for g_t in np.asarray(gates, np.float64):
        a = g_t + h @ w_h + b_h
        i, f, g, o = (a[k * hidden : (k + 1) * hidden] for k in range(4))
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        outputs.append(h)
    return np.stack(outputs)


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
    streamed, quadratic = _pool(scores, inputs, mask), _pool_quadratic(scores, inputs, mask)
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
    longer = _pool(longer_scores, longer_inputs, longer_mask)
    np.testing.assert_array_equal(longer[:, :7], _pool(scores, inputs, mask))
    np.testing.assert_array_equal(longer[:, 7:], 0.0)


def test_causal_pool_large_scores_do_not_overflow():
    rng = np.random.default_rng(3)
    mask = _mask(33)
    scores, inputs = _pool_inputs(rng, 33)
    # +-1e4 with O(1) differences between positions: exp of any raw score overflows.
    scores = (1e4 * np.sign(scores) + scores).astype(np.float32)
    scores, inputs = _with_garbage(scores, inputs, mask)
    expected = np_causal_pool(scores, inputs, mask)
    for pooled in (_pool(scores, inputs, mask), _pool_quadratic(scores, inputs, mask)):
        chex.assert_tree_all_finite(pooled)
        np.testing.assert_allclose(pooled, expected, rtol=1e-4, atol=1e-5)


def test_causal_pool_under_vmap_and_jit():
    rng = np.random.default_rng(4)
    mask = np.stack([_mask(7), _mask(7)[::-1]])
    scores, inputs = (np.stack(both) for both in zip(_pool_inputs(rng, 7), _pool_inputs(rng, 7)))
    weights = rng.normal(size=inputs.shape).astype(np.float32)

    def loss(scores, inputs, mask, weights):
        return jnp.sum(weights * causal_softmax_pool(scores, inputs, mask))

    grad = jax.grad(loss, argnums=(0, 1))
    pooled = jax.jit(jax.vmap(causal_softmax_pool))(scores, inputs, mask)
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
            return jnp.sum(weights * jnp.tanh(causal_softmax_pool(scores, inputs, mask)))

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
        return lambda s, x: jnp.sum(weights * jnp.tanh(pool(s, x, mask)))

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
        return jax.value_and_grad(lambda s, x: jnp.sum(jnp.sin(pool(s, x, mask))), argnums=(0, 1))

    per_step_carries = batch * steps * num_hops * features
    ours = _largest_intermediate(jax.make_jaxpr(value_and_grad(causal_softmax_pool))(scores, inputs).jaxpr)
    assert ours <= batch * steps * max(num_hops, features) < per_step_carries
    # The check sees inside the transformations: the quadratic version's [B, r, T, T] shows.
    quadratic = jax.make_jaxpr(value_and_grad(causal_softmax_pool_quadratic))(scores, inputs).jaxpr
    assert _largest_intermediate(quadratic) >= batch * num_hops * steps * steps


# --- LSTM scan and pooling over time -----------------------------------------------------------


T, B, H = 6, 3, 4
LENGTHS = np.array([6, 3, 1])


@pytest.fixture(scope="module")
def lstm_data():
    rng = np.random.default_rng(7)
    gates = rng.normal(size=(T, B, 4 * H)).astype(np.float32)
    mask = np.arange(T)[:, None] < LENGTHS[None, :]
    # Garbage in the padded steps must not matter.
    gates[~mask] = 1e3
    kernel = rng.normal(scale=0.5, size=(H, 4 * H)).astype(np.float32)
    bias = rng.normal(scale=0.5, size=(4 * H,)).astype(np.float32)
    return gates, kernel, bias, mask


_lstm = jax.jit(recurrent.lstm_scan)


def test_lstm_scan_matches_pytorch_equations_on_padded_batch(lstm_data):
    gates, kernel, bias, mask = lstm_data
    out = _lstm(gates, kernel, bias, mask)
    chex.assert_shape(out, (T, B, H))
    expected = np.zeros((T, B, H))
    for b, n in enumerate(LENGTHS):
        expected[:n, b] = np_lstm(gates[:n, b], kernel.astype(np.float64), bias.astype(np.float64))
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    # Extra trailing padding (other garbage) changes no valid output.
    longer_gates = np.concatenate([gates, np.full((2, B, 4 * H), -5.0, np.float32)])
    longer_mask = np.concatenate([mask, np.zeros((2, B), bool)])
    longer = _lstm(longer_gates, kernel, bias, longer_mask)
    np.testing.assert_array_equal(longer[:T], out)
    np.testing.assert_array_equal(longer[T:], 0.0)


def test_lstm_scan_without_mask_and_gradients(lstm_data):
    gates, kernel, bias, mask = lstm_data
    gates = np.where(mask[..., None], gates, np.float32(0.3))
    expected = np.stack([np_lstm(gates[:, b], kernel, bias) for b in range(B)], axis=1)
    np.testing.assert_allclose(_lstm(gates, kernel, bias), expected, rtol=1e-5, atol=1e-6)

    def loss(gates, kernel, bias):
        return jnp.sum(jnp.square(recurrent.lstm_scan(gates, kernel, bias, mask)))

    grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(gates, kernel, bias)
    chex.assert_tree_all_finite(grads)
    assert np.all(np.asarray(grads[0])[~mask] == 0.0)


def test_last_valid_state():
    rng = np.random.default_rng(8)
    states = rng.normal(size=(4, 3, 2)).astype(np.float32)
    # Sequence 0 is valid at steps 0 and 2 (an interior pad), sequence 1 at step 0, 2 nowhere.
    mask = np.array([[1, 1, 0], [0, 0, 0], [1, 0, 0], [0, 0, 0]], bool)
    last = recurrent.last_valid_state(states, mask)
    chex.assert_shape(last, (3, 2))
    np.testing.assert_array_equal(last[0], states[2, 0])
    np.testing.assert_array_equal(last[1], states[0, 1])
    np.testing.assert_array_equal(last[2], 0.0)
    np.testing.assert_array_equal(recurrent.last_valid_state(states), states[-1])


def test_masked_max_over_time():
    rng = np.random.default_rng(9)
    x = -np.abs(rng.normal(size=(4, 3, 2))).astype(np.float32) - 1
    mask = np.array([[1, 1, 0], [1, 0, 0], [1, 0, 0], [0, 0, 0]], bool)
    x[~mask] = 1e3  # padding never wins
    maximum = recurrent.masked_max_over_time(x, mask)
    chex.assert_shape(maximum, (3, 2))
    np.testing.assert_array_equal(maximum[0], x[:3, 0].max(0))
    np.testing.assert_array_equal(maximum[1], x[0, 1])
    np.testing.assert_array_equal(maximum[2], 0.0)
    np.testing.assert_array_equal(recurrent.masked_max_over_time(x), x.max(0))


# --- structured self-attention -----------------------------------------------------------------


def test_structured_self_attention_matches_numpy_with_padding():
    rng = np.random.default_rng(10)
    batch, steps, hidden_dim, attention_dim, num_hops = 4, 6, 3, 5, 2
    hidden = rng.normal(size=(batch, steps, hidden_dim)).astype(np.float32)
    w1 = rng.normal(size=(hidden_dim, attention_dim)).astype(np.float32)
    w2 = rng.normal(size=(attention_dim, num_hops)).astype(np.float32)
    mask = _mask(steps)
    hidden[~mask] = np.nan
    pooled, weights = jax.jit(structured_self_attention)(hidden, w1, w2, mask)
    chex.assert_shape([pooled, weights], [(batch, hidden_dim), (batch, num_hops, steps)])
    expected_pooled, expected_weights = np_structured_self_attention(hidden, w1, w2, mask)
    np.testing.assert_allclose(pooled, expected_pooled, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(weights, expected_weights, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.sum(weights, axis=-1), mask.any(axis=1)[:, None] * np.ones(num_hops), rtol=1e-6)
