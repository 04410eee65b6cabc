"""GRU and bidirectional scans against NumPy loops with PyTorch's equations, padding, gradients,
final states and pooling over time; every op on one sequence, on extra leading axes and under
`vmap`."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.ops import pooling, recurrent
from tests.float32 import summed_atol
from tests.ops.recurrent_references import np_bidirectional, np_gru, np_lstm, padded_batch

B, T, D, H = 3, 6, 4, 5
LENGTHS = np.array([6, 3, 1])  # a full, a padded and a one-token sequence

# Each bidirectional layer with its NumPy cell and gate count.
BIDIRECTIONAL = {"gru": (recurrent.bidirectional_gru, np_gru, 3), "lstm": (recurrent.bidirectional_lstm, np_lstm, 4)}


def _padded_batch(num_gates):
    return padded_batch(LENGTHS, T, D, H, num_gates)


@pytest.fixture(scope="module", params=sorted(BIDIRECTIONAL))
def bidirectional(request):
    """(jitted layer, NumPy cell, x, mask, params) for a GRU and an LSTM."""
    layer, cell, num_gates = BIDIRECTIONAL[request.param]
    return (jax.jit(layer), cell, *_padded_batch(num_gates))


# --- forward -----------------------------------------------------------------------------------


def test_bidirectional_layers_match_numpy_loops_on_padded_batch(bidirectional):
    layer, cell, x, mask, params = bidirectional
    out = layer(x, *params, mask=mask)
    chex.assert_shape(out, (B, T, 2, H))
    np.testing.assert_allclose(out, np_bidirectional(x, mask, params, cell), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(out)[~mask], 0.0)
    # The backward direction starts at each sequence's own last token: its output there is one
    # step from the zero state.
    w_i, b_i, w_h, b_h = (np.asarray(p, np.float64) for p in params)
    for b, n in enumerate(LENGTHS):
        first_step = cell(x[b, n - 1 : n], w_i[1], b_i[1], w_h[1], b_h[1])[0]
        np.testing.assert_allclose(out[b, n - 1, 1], first_step, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("masked", [True, False])
def test_a_gru_of_many_rows_projects_in_its_loop_with_the_same_values_and_gradients(masked):
    """From `IN_LOOP_PROJECTION_ROWS` sequences the GRU's forward pass projects each step's input
    inside its loop; its values are the NumPy loops', and its gradients (the backward pass of
    the projection before the loop) are the small batch's, row by row and summed for the weights."""
    x, mask, params = _padded_batch(3)
    if not masked:  # the pads are ordinary steps: ordinary values (as without_mask's test)
        x = np.where(mask[..., None], x, np.float32(-0.5))
    copies = -(-recurrent.IN_LOOP_PROJECTION_ROWS // B)
    many_x, many_mask = np.tile(x, (copies, 1, 1)), np.tile(mask, (copies, 1))
    layer = jax.jit(lambda x, *params, mask: recurrent.bidirectional_gru(x, *params, mask=mask if masked else None))
    out = layer(many_x, *params, mask=many_mask)
    reference = np_bidirectional(x, mask if masked else np.ones_like(mask), params, np_gru)
    np.testing.assert_allclose(out, np.tile(reference, (copies, 1, 1, 1)), rtol=1e-5, atol=1e-5)

    def loss(x, *params, mask):
        return jnp.sum(jnp.sin(layer(x, *params, mask=mask)))

    grads = jax.grad(loss, argnums=range(5))(many_x, *params, mask=many_mask)
    small = jax.grad(loss, argnums=range(5))(x, *params, mask=mask)
    np.testing.assert_allclose(grads[0], np.tile(small[0], (copies, 1, 1)), rtol=1e-5, atol=1e-6)
    for many, one in zip(grads[1:], small[1:]):
        # A weight's gradient sums one term a step of every row: copies · B · T of them.
        expected = copies * np.asarray(one)
        np.testing.assert_allclose(many, expected, rtol=0, atol=summed_atol(copies * B * T, expected))


def test_extra_padding_changes_no_valid_output(bidirectional):
    layer, _, x, mask, params = bidirectional
    out = layer(x, *params, mask=mask)
    longer_x = np.concatenate([x, np.full((B, 3, D), -7.0, np.float32)], axis=1)
    longer_mask = np.concatenate([mask, np.zeros((B, 3), bool)], axis=1)
    longer = layer(longer_x, *params, mask=longer_mask)
    np.testing.assert_allclose(longer[:, :T], out, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(longer[:, T:], 0.0)


def test_without_mask_pads_are_ordinary_steps(bidirectional):
    layer, cell, x, mask, params = bidirectional
    x = np.where(mask[..., None], x, np.float32(-0.5))
    out = layer(x, *params)
    everything = np.ones((B, T), bool)
    np.testing.assert_allclose(out, np_bidirectional(x, everything, params, cell), rtol=1e-5, atol=1e-5)


# --- gradients ---------------------------------------------------------------------------------


def autodiff_gru_scan(input_gates, hidden_kernel, hidden_bias, mask):
    """The plain scan over input_gates [B, T, 3H], differentiated by JAX: the reference for the
    hand-written VJP."""

    def step(h, inputs):
        gi, valid = inputs
        gh = h @ hidden_kernel + jnp.broadcast_to(hidden_bias, gi.shape)
        r = jax.nn.sigmoid(gi[:, :H] + gh[:, :H])
        z = jax.nn.sigmoid(gi[:, H : 2 * H] + gh[:, H : 2 * H])
        n = jnp.tanh(gi[:, 2 * H :] + r * gh[:, 2 * H :])
        h_new = (1 - z) * n + z * h
        valid = valid[:, None]
        return jnp.where(valid, h_new, h), jnp.where(valid, h_new, 0.0)

    time_major = (jnp.swapaxes(input_gates, 0, 1), mask.T)
    return jnp.swapaxes(jax.lax.scan(step, jnp.zeros((input_gates.shape[0], H)), time_major)[1], 0, 1)


# Trailing pads, and interior pads (steps 1 and 4 of sequence 0), across which the state and
# its cotangent are carried.
INTERIOR_PADS = np.array([[1, 0, 1, 1, 0, 1], [1, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0]], bool)


@pytest.mark.parametrize("pads", ["trailing", "interior"])
def test_gru_scan_values_and_gradients_match_autodiff_of_the_plain_scan(pads):
    mask = np.arange(T)[None, :] < LENGTHS[:, None] if pads == "trailing" else INTERIOR_PADS
    rng = np.random.default_rng(1)
    input_gates = rng.normal(size=(B, T, 3 * H)).astype(np.float32)
    kernel = rng.normal(scale=0.5, size=(H, 3 * H)).astype(np.float32)
    bias = rng.normal(scale=0.5, size=(3 * H,)).astype(np.float32)
    weights = rng.normal(size=(B, T, H)).astype(np.float32)

    def loss(scan):
        return lambda g, k, b: jnp.sum(weights * jnp.tanh(scan(g, k, b, mask=mask)))

    np.testing.assert_allclose(
        recurrent.gru_scan(input_gates, kernel, bias, mask=mask),
        autodiff_gru_scan(input_gates, kernel, bias, mask),
        rtol=1e-5,
        atol=1e-6,
    )
    ours = jax.jit(jax.grad(loss(recurrent.gru_scan), argnums=(0, 1, 2)))(input_gates, kernel, bias)
    reference = jax.jit(jax.grad(loss(autodiff_gru_scan), argnums=(0, 1, 2)))(input_gates, kernel, bias)
    for got, expected in zip(ours, reference):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    # Padded steps receive no gradient.
    assert np.all(np.asarray(ours[0])[~mask] == 0.0)


def test_lstm_scan_gradient_matches_finite_differences():
    mask = INTERIOR_PADS
    rng = np.random.default_rng(2)
    args = (
        rng.normal(size=(B, T, 4 * H)),
        rng.normal(scale=0.5, size=(H, 4 * H)),
        rng.normal(scale=0.5, size=(4 * H,)),
    )
    with jax.enable_x64():
        jax.test_util.check_grads(
            lambda g, k, b: jnp.sum(jnp.sin(recurrent.lstm_scan(g, k, b, mask=mask))), args, order=1, modes=["rev"]
        )


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


# --- final states and pooling over time ----------------------------------------------------------


# Sequence 0 is valid at steps 0 and 2 (an interior pad), sequence 1 at step 0, 2 nowhere.
POOL_MASK = np.array([[1, 0, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], bool)


def test_last_valid_state():
    states = np.random.default_rng(8).normal(size=(3, 4, 2)).astype(np.float32)
    last = recurrent.last_valid_state(states, mask=POOL_MASK)
    chex.assert_shape(last, (3, 2))
    np.testing.assert_array_equal(last[0], states[0, 2])
    np.testing.assert_array_equal(last[1], states[1, 0])
    np.testing.assert_array_equal(last[2], 0.0)
    np.testing.assert_array_equal(recurrent.last_valid_state(states), states[:, -1])


def test_bidirectional_final_state():
    states = np.random.default_rng(8).normal(size=(3, 4, 2, 5)).astype(np.float32)
    mask = np.array([[0, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], bool)
    final = recurrent.bidirectional_final_state(states, mask=mask)
    chex.assert_shape(final, (3, 10))
    np.testing.assert_array_equal(final[0], np.concatenate([states[0, 2, 0], states[0, 1, 1]]))
    np.testing.assert_array_equal(final[1], np.concatenate([states[1, 0, 0], states[1, 0, 1]]))
    np.testing.assert_array_equal(final[2], 0.0)
    unmasked = recurrent.bidirectional_final_state(states)
    np.testing.assert_array_equal(unmasked, np.concatenate([states[:, -1, 0], states[:, 0, 1]], axis=-1))


def test_bidirectional_final_state_is_pytorchs_final_hidden_state():
    """The forward direction's last output and the backward direction's output at the first
    step are each direction's state after reading its whole sequence."""
    x, mask, params = _padded_batch(num_gates=3)
    final = recurrent.bidirectional_final_state(recurrent.bidirectional_gru(x, *params, mask=mask), mask=mask)
    w_i, b_i, w_h, b_h = (np.asarray(p, np.float64) for p in params)
    for b, n in enumerate(LENGTHS):
        forward = np_gru(x[b, :n], w_i[0], b_i[0], w_h[0], b_h[0])[-1]
        backward = np_gru(x[b, :n][::-1], w_i[1], b_i[1], w_h[1], b_h[1])[-1]
        np.testing.assert_allclose(final[b], np.concatenate([forward, backward]), rtol=1e-5, atol=1e-6)


def test_masked_mean_over_time():
    x = np.random.default_rng(2).normal(size=(3, 4, 2)).astype(np.float32)
    x[~POOL_MASK] = np.nan  # padding never reaches the sum
    mean = pooling.masked_mean_over_time(x, mask=POOL_MASK)
    chex.assert_shape(mean, (3, 2))
    np.testing.assert_allclose(mean[0], x[0, [0, 2]].mean(0), rtol=1e-6)
    np.testing.assert_allclose(mean[1], x[1, 0], rtol=1e-6)
    np.testing.assert_array_equal(mean[2], 0.0)
    x = np.nan_to_num(x)
    np.testing.assert_allclose(pooling.masked_mean_over_time(x), x.mean(1), rtol=1e-6)


def test_masked_max_over_time():
    x = -np.abs(np.random.default_rng(9).normal(size=(3, 4, 2))).astype(np.float32) - 1
    x[~POOL_MASK] = 1e3  # padding never wins
    maximum = pooling.masked_max_over_time(x, mask=POOL_MASK)
    chex.assert_shape(maximum, (3, 2))
    np.testing.assert_array_equal(maximum[0], x[0, [0, 2]].max(0))
    np.testing.assert_array_equal(maximum[1], x[1, 0])
    np.testing.assert_array_equal(maximum[2], 0.0)
    np.testing.assert_array_equal(pooling.masked_max_over_time(x), x.max(1))


# --- one sequence, extra leading axes, vmap ----------------------------------------------------


def _op_calls():
    """name -> (op taking (x, mask) with its weights bound, x [B, T, ...], mask [B, T])."""
    x, mask, gru = _padded_batch(num_gates=3)
    _, _, lstm = _padded_batch(num_gates=4)
    rng = np.random.default_rng(3)
    gates = {g: rng.normal(size=(B, T, g * H)).astype(np.float32) for g in (3, 4)}
    states = rng.normal(size=(B, T, 2, H)).astype(np.float32)
    return {
        "gru_scan": (lambda g, m: recurrent.gru_scan(g, gru[2][0], gru[3][0], mask=m), gates[3], mask),
        "lstm_scan": (lambda g, m: recurrent.lstm_scan(g, lstm[2][0], lstm[3][0], mask=m), gates[4], mask),
        "bidirectional_gru": (lambda x, m: recurrent.bidirectional_gru(x, *gru, mask=m), x, mask),
        "bidirectional_lstm": (lambda x, m: recurrent.bidirectional_lstm(x, *lstm, mask=m), x, mask),
        "last_valid_state": (lambda s, m: recurrent.last_valid_state(s, mask=m), states[:, :, 0], mask),
        "bidirectional_final_state": (lambda s, m: recurrent.bidirectional_final_state(s, mask=m), states, mask),
        "masked_mean_over_time": (lambda s, m: pooling.masked_mean_over_time(s, mask=m), states[:, :, 1], mask),
        "masked_max_over_time": (lambda s, m: pooling.masked_max_over_time(s, mask=m), states[:, :, 1], mask),
    }


OPS = sorted(_op_calls())


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("masked", [True, False])
def test_one_sequence_leading_axes_and_vmap_equal_the_batched_call(name, masked):
    op, x, mask = _op_calls()[name]
    mask = mask if masked else None
    call = jax.jit(op)
    batched = call(x, mask)
    for b in range(B):
        np.testing.assert_allclose(call(x[b], None if mask is None else mask[b]), batched[b], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(jax.jit(jax.vmap(op))(x, mask), batched, rtol=1e-6, atol=1e-6)
    stacked = jax.tree.map(lambda a: np.stack([a, a]), (x, mask))
    np.testing.assert_allclose(call(*stacked)[1], batched, rtol=1e-6, atol=1e-6)
