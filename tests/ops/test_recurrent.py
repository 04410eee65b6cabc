"""GRU and bidirectional LSTM scans against NumPy loops with PyTorch's equations, padding,
gradients, pooling."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.ops import recurrent

T, B, D, H = 6, 3, 4, 5
LENGTHS = np.array([6, 3, 1])  # a full, a padded and a one-token sequence


def _params(rng, num_inputs, num_gates=3):
    """(input_kernel [2, D, GH], input_bias [2, GH], hidden_kernel [2, H, GH], hidden_bias [2, GH]),
    G = 3 gates for a GRU, 4 for an LSTM."""
    shapes = [(2, num_inputs, num_gates * H), (2, num_gates * H), (2, H, num_gates * H), (2, num_gates * H)]
    return tuple(rng.normal(scale=0.5, size=s).astype(np.float32) for s in shapes)


def _padded_batch(num_gates=3):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(T, B, D)).astype(np.float32)
    mask = np.arange(T)[:, None] < LENGTHS[None, :]
    # Garbage in the padded steps must not matter.
    x[~mask] = 1e3
    return x, mask, _params(rng, D, num_gates)


@pytest.fixture(scope="module")
def data():
    return _padded_batch()


# --- NumPy reference ---------------------------------------------------------------------------


def _sigmoid(a):
    return 1 / (1 + np.exp(-a))


def np_gru(x, w_i, b_i, w_h, b_h):
    """PyTorch nn.GRU, one direction, one sequence: x [N, D] -> [N, H] (float64 loop)."""
    h = np.zeros(w_h.shape[0])
    outputs = []
    for x_t in x:
        gi, gh = x_t @ w_i + b_i, h @ w_h + b_h
        r = _sigmoid(gi[:H] + gh[:H])
        z = _sigmoid(gi[H : 2 * H] + gh[H : 2 * H])
        n = np.tanh(gi[2 * H :] + r * gh[2 * H :])
        h = (1 - z) * n + z * h
        outputs.append(h)
    return np.stack(outputs)


def np_lstm(x, w_i, b_i, w_h, b_h):
    """PyTorch nn.LSTM, one direction, one sequence: x [n, D] -> [n, H] (float64 loop)."""
    hidden = w_h.shape[0]
    h, c = np.zeros(hidden), np.zeros(hidden)
    outputs = []
    for x_t in x:
        a = x_t @ w_i + b_i + h @ w_h + b_h
        i, f, g, o = (a[k * hidden : (k + 1) * hidden] for k in range(4))
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        outputs.append(h)
    return np.stack(outputs)


def np_bidirectional(x, mask, params, cell=np_gru):
    """Each sequence run on its own valid steps only by `cell` (a NumPy loop over one sequence);
    [T, B, 2, H] with zeros at pads."""
    w_i, b_i, w_h, b_h = (np.asarray(p, np.float64) for p in params)
    out = np.zeros((x.shape[0], x.shape[1], 2, w_h.shape[1]))
    for b in range(x.shape[1]):
        n = int(mask[:, b].sum())
        seq = np.asarray(x[:n, b], np.float64)
        out[:n, b, 0] = cell(seq, w_i[0], b_i[0], w_h[0], b_h[0])
        out[:n, b, 1] = cell(seq[::-1], w_i[1], b_i[1], w_h[1], b_h[1])[::-1]
    return out


# --- forward -----------------------------------------------------------------------------------


# Each bidirectional layer with its NumPy cell and gate count.
BIDIRECTIONAL = {"gru": (recurrent.bidirectional_gru, np_gru, 3), "lstm": (recurrent.bidirectional_lstm, np_lstm, 4)}


@pytest.fixture(scope="module", params=sorted(BIDIRECTIONAL))
def bidirectional(request):
    """(jitted layer, NumPy cell, x, mask, params) for a GRU and an LSTM."""
    layer, cell, num_gates = BIDIRECTIONAL[request.param]
    return (jax.jit(layer), cell, *_padded_batch(num_gates))


def test_bidirectional_layers_match_numpy_loops_on_padded_batch(bidirectional):
    layer, cell, x, mask, params = bidirectional
    out = layer(x, *params, mask=mask)
    chex.assert_shape(out, (T, B, 2, H))
    np.testing.assert_allclose(out, np_bidirectional(x, mask, params, cell), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(out)[~mask], 0.0)
    # The backward direction starts at each sequence's own last token: its output there is one
    # step from the zero state.
    w_i, b_i, w_h, b_h = (np.asarray(p, np.float64) for p in params)
    for b, n in enumerate(LENGTHS):
        first_step = cell(np.asarray(x[n - 1 : n, b], np.float64), w_i[1], b_i[1], w_h[1], b_h[1])[0]
        np.testing.assert_allclose(out[n - 1, b, 1], first_step, rtol=1e-5, atol=1e-6)


def test_extra_padding_changes_no_valid_output(bidirectional):
    layer, _, x, mask, params = bidirectional
    out = layer(x, *params, mask=mask)
    longer_x = np.concatenate([x, np.full((3, B, D), -7.0, np.float32)])
    longer_mask = np.concatenate([mask, np.zeros((3, B), bool)])
    longer = layer(longer_x, *params, mask=longer_mask)
    np.testing.assert_allclose(longer[:T], out, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(longer[T:], 0.0)


def test_without_mask_pads_are_ordinary_steps(bidirectional):
    layer, cell, x, mask, params = bidirectional
    x = np.where(mask[..., None], x, np.float32(-0.5))
    out = layer(x, *params)
    everything = np.ones((T, B), bool)
    np.testing.assert_allclose(out, np_bidirectional(x, everything, params, cell), rtol=1e-5, atol=1e-5)


# --- gradients ---------------------------------------------------------------------------------


def autodiff_gru_scan(input_gates, hidden_kernel, hidden_bias, mask):
    """The plain scan, differentiated by JAX: the reference for the hand-written VJP."""

    def step(h, inputs):
        gi, valid = inputs
        gh = h @ hidden_kernel + jnp.broadcast_to(hidden_bias, gi.shape)
        r = jax.nn.sigmoid(gi[:, :H] + gh[:, :H])
        z = jax.nn.sigmoid(gi[:, H : 2 * H] + gh[:, H : 2 * H])
        n = jnp.tanh(gi[:, 2 * H :] + r * gh[:, 2 * H :])
        h_new = (1 - z) * n + z * h
        valid = valid[:, None]
        return jnp.where(valid, h_new, h), jnp.where(valid, h_new, 0.0)

    return jax.lax.scan(step, jnp.zeros((input_gates.shape[1], H)), (input_gates, mask))[1]


def test_gru_scan_gradients_match_autodiff_of_the_plain_scan(data):
    _, mask, _ = data
    rng = np.random.default_rng(1)
    input_gates = rng.normal(size=(T, B, 3 * H)).astype(np.float32)
    kernel = rng.normal(scale=0.5, size=(H, 3 * H)).astype(np.float32)
    bias = rng.normal(scale=0.5, size=(3 * H,)).astype(np.float32)
    weights = rng.normal(size=(T, B, H)).astype(np.float32)

    def loss(scan):
        return lambda g, k, b: jnp.sum(weights * jnp.tanh(scan(g, k, b, mask)))

    ours = jax.jit(jax.grad(loss(recurrent.gru_scan), argnums=(0, 1, 2)))(input_gates, kernel, bias)
    reference = jax.jit(jax.grad(loss(autodiff_gru_scan), argnums=(0, 1, 2)))(input_gates, kernel, bias)
    for got, expected in zip(ours, reference):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    # Padded steps receive no gradient.
    assert np.all(np.asarray(ours[0])[~mask] == 0.0)


@pytest.mark.parametrize("kind", sorted(BIDIRECTIONAL))
def test_bidirectional_gradients_are_finite_and_skip_padding(kind):
    layer, _, num_gates = BIDIRECTIONAL[kind]
    x, mask, params = _padded_batch(num_gates)

    def loss(x, params):
        return jnp.sum(jnp.square(layer(x, *params, mask=mask)))

    dx, dparams = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, params)
    chex.assert_tree_all_finite((dx, dparams))
    assert np.all(np.asarray(dx)[~mask] == 0.0)
    assert all(np.any(np.asarray(d) != 0) for d in dparams)


# --- pooling -----------------------------------------------------------------------------------


def test_masked_mean_over_time():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(4, 3, 2)).astype(np.float32)
    mask = np.array([[1, 1, 0], [1, 0, 0], [1, 0, 0], [0, 0, 0]], bool)
    mean = recurrent.masked_mean_over_time(x, mask)
    np.testing.assert_allclose(mean[0], x[:3, 0].mean(0), rtol=1e-6)
    np.testing.assert_allclose(mean[1], x[0, 1], rtol=1e-6)
    np.testing.assert_array_equal(mean[2], 0.0)
    np.testing.assert_allclose(recurrent.masked_mean_over_time(x), x.mean(0), rtol=1e-6)
