"""Recurrent scans and pooling over time.

Pure functions on arrays, usable under `jit`, `vmap` and `grad`. Sequences are time-major
([T, B, ...]), the layout `lax.scan` reads; the input projections of all time steps are one
matmul before the scan, so the loop body holds only the recurrent matmul and the gate math.

Padding: a `mask` [T, B] marks real steps. At a padded step the state is carried through
unchanged and the output is zero, so trailing pads never touch the forward direction's valid
outputs, and a backward scan starts at each sequence's own last token. Without a mask every
step is processed (how unmasked reference code treats pads).

References:
    Cho et al. Learning Phrase Representations using RNN Encoder-Decoder for Statistical
        Machine Translation. EMNLP 2014 (eq. 5-8, the GRU).
    PyTorch `torch.nn.GRU` documentation (bias placement: b_hn inside the reset product).
"""
import jax
import jax.numpy as jnp
import os
UNROLL = int(os.environ.get("UNROLL", "1"))

# ---------------------------------------------------------------------------------------------
# GRU (PyTorch semantics: an input and a hidden bias for every gate)
# ---------------------------------------------------------------------------------------------


def _split_gates(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """[..., 3H] -> ([..., 2H] reset and update part, [..., H] new-gate part)."""
    num_hidden = x.shape[-1] // 3
    return x[..., : 2 * num_hidden], x[..., 2 * num_hidden :]


def _fold_bias(input_gates: jax.Array, hidden_bias: jax.Array) -> jax.Array:
    """Adds b_hr and b_hz to the input gates. They only add to the gate pre-activations, so
    they are added once here instead of at every step; b_hn stays inside (r multiplies it)."""
    reset_update_bias, new_bias = _split_gates(hidden_bias)
    folded = jnp.concatenate([reset_update_bias, jnp.zeros_like(new_bias)])
    return input_gates + jnp.broadcast_to(folded, input_gates.shape)


def _gates(input_gates, hidden_gates, new_bias):
    """Reset r, update z, new-gate hidden part hn = W_hn h + b_hn, and n, from the folded input
    gates and h W_h; every argument [..., 3H] except new_bias [..., H]."""
    reset, update = jnp.split(jax.nn.sigmoid(_split_gates(input_gates)[0] + _split_gates(hidden_gates)[0]), 2, -1)
    hidden_new = _split_gates(hidden_gates)[1] + new_bias
    return reset, update, hidden_new, jnp.tanh(_split_gates(input_gates)[1] + reset * hidden_new)


@jax.custom_vjp
def _gru_states(input_gates, hidden_kernel, hidden_bias, mask):
    """[T, B, 3H], [H, 3H], [3H], [T, B] -> states [T, B, H]; a padded step repeats the state."""
    return _gru_states_forward(input_gates, hidden_kernel, hidden_bias, mask)[0]


def _gru_states_forward(input_gates, hidden_kernel, hidden_bias, mask):
    gates = _fold_bias(input_gates, hidden_bias)
    num_hidden = hidden_kernel.shape[0]
    new_bias = jnp.broadcast_to(_split_gates(hidden_bias)[1], gates.shape[1:-1] + (num_hidden,))

    def step(h, inputs):
        step_gates, valid = inputs
        _, update, _, new = _gates(step_gates, h @ hidden_kernel, new_bias)
        h = jnp.where(valid[..., None], new + update * (h - new), h)
        return h, h

    h0 = jnp.zeros(gates.shape[1:-1] + (num_hidden,), gates.dtype)
    states = jax.lax.scan(step, h0, (gates, mask), unroll=UNROLL)[1]
    return states, (input_gates, hidden_kernel, hidden_bias, mask, states)


def _gru_states_backward(residuals, states_cotangent):
    """Backpropagation through time with one matmul per step (dh_{t-1} needs dgates_t W_h^T).

    Everything that does not depend on the running cotangent is computed for all steps at
    once, outside the loop: the gates (recomputed from the saved states with one large
    matmul) before it, and the kernel gradient sum_t h_{t-1}^T dgates_t (another large
    matmul) after it. Autodiff of the forward scan would instead do a small kernel-gradient
    matmul at every step and save every gate from the forward pass.
    """
    input_gates, hidden_kernel, hidden_bias, mask, states = residuals
    gates = _fold_bias(input_gates, hidden_bias)
    previous = jnp.concatenate([jnp.zeros_like(states[:1]), states[:-1]], axis=0)
    new_bias = jnp.broadcast_to(_split_gates(hidden_bias)[1], states.shape)
    reset, update, hidden_new, new = _gates(gates, previous @ hidden_kernel, new_bias)
    # With g the cotangent of h_new = n + z (h - n), the pre-activation cotangents are g times
    # these factors: d a_n = g (1 - z)(1 - n^2), d a_r = d a_n hn r (1 - r),
    # d a_z = g (h - n) z (1 - z), d hn = d a_n r.
    new_factor = (1 - update) * (1 - jnp.square(new))
    hidden_factors = jnp.concatenate(
        [new_factor * hidden_new * reset * (1 - reset), (previous - new) * update * (1 - update), new_factor * reset],
        axis=-1,
    )
    kernel_t = hidden_kernel.T

    def step(carry, inputs):
        cotangent, valid, factors, step_update = inputs
        valid = valid[..., None]
        total = cotangent + carry
        g = jnp.where(valid, total, jnp.zeros_like(total))
        hidden_gates_cotangent = jnp.concatenate([g, g, g], axis=-1) * factors
        carry = g * step_update + hidden_gates_cotangent @ kernel_t + jnp.where(valid, jnp.zeros_like(total), total)
        return carry, g

    g = jax.lax.scan(step, jnp.zeros_like(states[0]), (states_cotangent, mask, hidden_factors, update), reverse=True, unroll=UNROLL)[1]
    hidden_gates_cotangent = jnp.concatenate([g, g, g], axis=-1) * hidden_factors
    input_gates_cotangent = jnp.concatenate(
        [_split_gates(hidden_gates_cotangent)[0], g * new_factor], axis=-1
    )
    kernel_cotangent = jnp.einsum("tbh,tbg->hg", previous, hidden_gates_cotangent)
    # b_hr, b_hz (folded into the input gates) and b_hn all receive the hidden-gate cotangent.
    bias_cotangent = jnp.sum(hidden_gates_cotangent, axis=(0, 1))
    return input_gates_cotangent, kernel_cotangent, bias_cotangent, None


_gru_states.defvjp(_gru_states_forward, _gru_states_backward)


def gru_scan(
    input_gates: jax.Array,
    hidden_kernel: jax.Array,
    hidden_bias: jax.Array,
    mask: jax.Array | None = None,
) -> jax.Array:
    """A GRU over time, from precomputed input projections (PyTorch's `nn.GRU` cell).

        r_t = sigmoid(W_ir x_t + b_ir + W_hr h_{t-1} + b_hr)
        z_t = sigmoid(W_iz x_t + b_iz + W_hz h_{t-1} + b_hz)
        n_t = tanh(W_in x_t + b_in + r_t * (W_hn h_{t-1} + b_hn))
        h_t = (1 - z_t) * n_t + z_t * h_{t-1},   h_0 = 0

    The loop body holds one [B, H] x [H, 3H] matmul and the gate math, forward and backward
    (a hand-written VJP keeps the kernel gradient out of the loop).

    Args:
        input_gates: [T, B, 3H] = x_t W_i + b_i for every step, gates in the order (r, z, n).
        hidden_kernel: [H, 3H] = W_h, same gate order.
        hidden_bias: [3H] = b_h.
        mask: optional [T, B] bool; padded steps keep the state and output zeros.

    Returns:
        [T, B, H] hidden states h_1..h_T (zero at padded steps).
    """
    if mask is None:
        return _gru_states(input_gates, hidden_kernel, hidden_bias, jnp.ones(input_gates.shape[:2], bool))
    states = _gru_states(input_gates, hidden_kernel, hidden_bias, mask)
    return jnp.where(mask[..., None], states, jnp.zeros_like(states))


def bidirectional_gru(
    x: jax.Array,
    input_kernel: jax.Array,
    input_bias: jax.Array,
    hidden_kernel: jax.Array,
    hidden_bias: jax.Array,
    mask: jax.Array | None = None,
) -> jax.Array:
    """One bidirectional GRU layer: a forward and a backward `gru_scan` run as one loop.

    The backward GRU reads the time-reversed sequence; both directions are stacked on a
    leading axis of the weights and advanced by the same `lax.scan` (a `vmap` of `gru_scan`),
    so T steps cost one loop of batched matmuls instead of two loops. The input projections
    of both directions are one batched matmul. With a mask, the backward direction first
    crosses the trailing pads with its state held at zero, so it starts at each sequence's
    own last token.

    Args:
        x: [T, B, D] inputs, time-major.
        input_kernel: [2, D, 3H] W_i of the (forward, backward) directions, gates (r, z, n).
        input_bias: [2, 3H].
        hidden_kernel: [2, H, 3H].
        hidden_bias: [2, 3H].
        mask: optional [T, B] bool.

    Returns:
        [T, B, 2, H]: forward and backward hidden states at each step (zero at padded steps);
        a reshape to [T, B, 2H] is PyTorch's concatenated output.
    """
    # Direction on axis 1 ([T, 2, B, ...]) is where the scan's vmap keeps it: no transposes.
    both = jnp.stack([x, jnp.flip(x, axis=0)], axis=1)
    gates = jnp.einsum("tkbd,kdg->tkbg", both, input_kernel)
    gates = gates + jnp.broadcast_to(input_bias[:, None, :], gates.shape)
    if mask is None:
        outputs = jax.vmap(gru_scan, in_axes=(1, 0, 0), out_axes=1)(gates, hidden_kernel, hidden_bias)
    else:
        masks = jnp.stack([mask, jnp.flip(mask, axis=0)], axis=1)
        outputs = jax.vmap(gru_scan, in_axes=(1, 0, 0, 1), out_axes=1)(gates, hidden_kernel, hidden_bias, masks)
    return jnp.stack([outputs[:, 0], jnp.flip(outputs[:, 1], axis=0)], axis=2)


# ---------------------------------------------------------------------------------------------
# Pooling over time
# ---------------------------------------------------------------------------------------------


def masked_mean_over_time(x: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """Mean over the valid steps, `sum_t mask_t x_t / max(sum_t mask_t, 1)`.

    Args:
        x: [T, B, ...] time-major values.
        mask: optional [T, B] bool; None averages over all T steps.

    Returns:
        [B, ...]; zero for a sequence with no valid step.
    """
    if mask is None:
        return jnp.mean(x, axis=0)
    mask = mask.reshape(mask.shape + (1,) * (x.ndim - mask.ndim))
    total = jnp.sum(jnp.where(mask, x, jnp.zeros_like(x)), axis=0)
    count = jnp.sum(mask.astype(x.dtype), axis=0)
    return total / jnp.maximum(count, 1)
