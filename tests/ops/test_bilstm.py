"""Bidirectional LSTM against a NumPy loop with PyTorch's LSTM equations: padding, the backward
direction's start, gradients; the single-step `lstm_cell` against the scan."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.ops import recurrent
from tests.ops.test_recurrent import np_bidirectional as np_bidirectional_loop

T, B, D, H = 6, 3, 4, 5
LENGTHS = np.array([6, 3, 1])  # a full, a padded and a one-token sequence


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(T, B, D)).astype(np.float32)
    mask = np.arange(T)[:, None] < LENGTHS[None, :]
    # Garbage in the padded steps must not matter.
    x[~mask] = 1e3
    shapes = [(2, D, 4 * H), (2, 4 * H), (2, H, 4 * H), (2, 4 * H)]
    params = tuple(rng.normal(scale=0.5, size=s).astype(np.float32) for s in shapes)
    return x, mask, params


def _sigmoid(a):
    return 1 / (1 + np.exp(-a))


def np_lstm(x, w_i, b_i, w_h, b_h):
    """PyTorch nn.LSTM, one direction, one sequence: x [n, D] -> [n, H] (float64 loop)."""
    h, c = np.zeros(H), np.zeros(H)
    outputs = []
    for x_t in x:
        a = x_t @ w_i + b_i + h @ w_h + b_h
        i, f, g, o = (a[k * H : (k + 1) * H] for k in range(4))
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        outputs.append(h)
    return np.stack(outputs)


def np_bidirectional(x, mask, params):
    return np_bidirectional_loop(x, mask, params, cell=np_lstm)


_bidirectional = jax.jit(recurrent.bidirectional_lstm)


def test_matches_numpy_loop_on_padded_batch(data):
    x, mask, params = data
    out = _bidirectional(x, *params, mask=mask)
    chex.assert_shape(out, (T, B, 2, H))
    np.testing.assert_allclose(out, np_bidirectional(x, mask, params), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(out)[~mask], 0.0)
    # The backward direction starts at each sequence's own last token: its output there is one
    # LSTM step from the zero state.
    w_i, b_i, w_h, b_h = (np.asarray(p, np.float64) for p in params)
    for b, n in enumerate(LENGTHS):
        first_step = np_lstm(np.asarray(x[n - 1 : n, b], np.float64), w_i[1], b_i[1], w_h[1], b_h[1])[0]
        np.testing.assert_allclose(out[n - 1, b, 1], first_step, rtol=1e-5, atol=1e-6)


def test_extra_padding_changes_no_valid_output(data):
    x, mask, params = data
    out = _bidirectional(x, *params, mask=mask)
    longer_x = np.concatenate([x, np.full((3, B, D), -7.0, np.float32)])
    longer_mask = np.concatenate([mask, np.zeros((3, B), bool)])
    longer = _bidirectional(longer_x, *params, mask=longer_mask)
    np.testing.assert_allclose(longer[:T], out, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(longer[T:], 0.0)


def test_without_mask_every_step_is_processed(data):
    x, mask, params = data
    x = np.where(mask[..., None], x, np.float32(0.3))
    out = _bidirectional(x, *params)
    np.testing.assert_allclose(out, np_bidirectional(x, np.ones_like(mask), params), rtol=1e-5, atol=1e-5)


def test_gradients_are_finite_and_skip_padding(data):
    x, mask, params = data

    def loss(x, *params):
        return jnp.sum(jnp.square(recurrent.bidirectional_lstm(x, *params, mask=mask)))

    grads = jax.jit(jax.grad(loss, argnums=tuple(range(5))))(x, *params)
    for g in grads:
        assert np.all(np.isfinite(g))
    np.testing.assert_array_equal(np.asarray(grads[0])[~mask], 0.0)


def test_lstm_cell_steps_reproduce_the_scan(data):
    x, _, (w_i, b_i, w_h, b_h) = data
    gates = np.einsum("tbd,dg->tbg", x, w_i[0]) + b_i[0][None, None]
    scanned = recurrent.lstm_scan(gates, w_h[0], b_h[0])
    h = c = jnp.zeros((B, H))
    for t in range(T):
        h, c = recurrent.lstm_cell(gates[t], h, c, w_h[0], b_h[0])
        np.testing.assert_allclose(h, scanned[t], rtol=1e-5, atol=1e-6)
