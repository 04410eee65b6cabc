"""The LSTM scan against PyTorch's equations (padding, gradients) and the single-step
`lstm_cell` against the scan (the bidirectional LSTM is tested with the GRU in
test_recurrent.py)."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.ops import recurrent
from tests.ops.recurrent_references import np_lstm_from_gates

B, T, H = 3, 6, 4
LENGTHS = np.array([6, 3, 1])


@pytest.fixture(scope="module")
def lstm_data():
    rng = np.random.default_rng(7)
    gates = rng.normal(size=(B, T, 4 * H)).astype(np.float32)
    mask = np.arange(T)[None, :] < LENGTHS[:, None]
    # Garbage in the padded steps must not matter.
    gates[~mask] = 1e3
    kernel = rng.normal(scale=0.5, size=(H, 4 * H)).astype(np.float32)
    bias = rng.normal(scale=0.5, size=(4 * H,)).astype(np.float32)
    return gates, kernel, bias, mask


_lstm = jax.jit(recurrent.lstm_scan)


def test_lstm_scan_matches_pytorch_equations_on_padded_batch(lstm_data):
    gates, kernel, bias, mask = lstm_data
    out = _lstm(gates, kernel, bias, mask=mask)
    chex.assert_shape(out, (B, T, H))
    expected = np.zeros((B, T, H))
    for b, n in enumerate(LENGTHS):
        expected[b, :n] = np_lstm_from_gates(gates[b, :n], kernel.astype(np.float64), bias.astype(np.float64))
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    # Extra trailing padding (other garbage) changes no valid output.
    longer_gates = np.concatenate([gates, np.full((B, 2, 4 * H), -5.0, np.float32)], axis=1)
    longer_mask = np.concatenate([mask, np.zeros((B, 2), bool)], axis=1)
    longer = _lstm(longer_gates, kernel, bias, mask=longer_mask)
    np.testing.assert_array_equal(longer[:, :T], out)
    np.testing.assert_array_equal(longer[:, T:], 0.0)


def test_lstm_scan_without_mask_and_gradients(lstm_data):
    gates, kernel, bias, mask = lstm_data
    gates = np.where(mask[..., None], gates, np.float32(0.3))
    expected = np.stack([np_lstm_from_gates(gates[b], kernel, bias) for b in range(B)])
    np.testing.assert_allclose(_lstm(gates, kernel, bias), expected, rtol=1e-5, atol=1e-6)

    def loss(gates, kernel, bias):
        return jnp.sum(jnp.square(recurrent.lstm_scan(gates, kernel, bias, mask=mask)))

    grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(gates, kernel, bias)
    chex.assert_tree_all_finite(grads)
    assert np.all(np.asarray(grads[0])[~mask] == 0.0)


def test_lstm_cell_steps_reproduce_the_scan(lstm_data):
    gates, kernel, bias, _ = lstm_data
    scanned = _lstm(gates, kernel, bias)
    h = c = jnp.zeros((B, H))
    for t in range(T):
        h, c = recurrent.lstm_cell(gates[:, t], h, c, kernel, bias)
        np.testing.assert_allclose(h, scanned[:, t], rtol=1e-5, atol=1e-6)
