"""The single-step `lstm_cell` against the LSTM scan (the bidirectional LSTM is tested with the
GRU in test_recurrent.py)."""

import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.ops import recurrent
from tests.ops.test_recurrent import _padded_batch

T, B, H = 6, 3, 5  # as test_recurrent.py


@pytest.fixture(scope="module")
def data():
    return _padded_batch(num_gates=4)


def test_lstm_cell_steps_reproduce_the_scan(data):
    x, _, (w_i, b_i, w_h, b_h) = data
    gates = np.einsum("tbd,dg->tbg", x, w_i[0]) + b_i[0][None, None]
    scanned = recurrent.lstm_scan(gates, w_h[0], b_h[0])
    h = c = jnp.zeros((B, H))
    for t in range(T):
        h, c = recurrent.lstm_cell(gates[t], h, c, w_h[0], b_h[0])
        np.testing.assert_allclose(h, scanned[t], rtol=1e-5, atol=1e-6)
