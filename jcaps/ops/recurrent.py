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

# ---------------------------------------------------------------------------------------------
# GRU (PyTorch semantics: an input and a hidden bias for every gate)
# ---------------------------------------------------------------------------------------------


def _flatten_steps(x: jax.Array) -> jax.Array:
    """[T, B, F] -> [T B, F]."""
    return x.reshape(-1, x.shape[-1])


def _matmul_2d(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """[T, B, D] x [D, F] -> [T, B, F] as one 2-D matmul. XLA:CPU runs the 2-D form, and the
    2-D kernel-gradient matmul of its transpose, two to three times faster than the
    3-D contraction."""
    return (_flatten_steps(x) @ kernel).reshape(x.shape[:-1] + kernel.shape[-1:])


def _split_gates(x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """[..., 3H] -> the reset, update and new-gate parts, [..., H] each."""
    return tuple(jnp.split(x, 3, axis=-1))


def _gates(reset_in, update_in, new_in, hidden_gates, new_bias):
    """r, z, hn = W_hn h + b_hn and n from the input-gate parts (b_hr, b_hz folded in), the
    hidden projection h W_h [..., 3H] and b_hn [..., H]."""
    hidden_reset, hidden_update, hidden_new = _split_gates(hidden_gates)
    reset = jax.nn.sigmoid(reset_in + hidden_reset)
    update = jax.nn.sigmoid(update_in + hidden_update)
    hidden_new = hidden_new + new_bias
    return reset, update, hidden_new, jnp.tanh(new_in + reset * hidden_new)


def _input_gate_parts(input_gates, hidden_bias):
    """The input gates as three [T, B, H] arrays, with b_hr and b_hz added.

    Those two biases only add to the gate pre-activations, so they are added once here
    rather than at every step (b_hn stays inside: r multiplies it). The scans read the three
    parts as separate arrays: XLA:CPU vectorises the gate math of a step about four times
    better than when it slices one [B, 3H] row block.
    """
    bias_reset, bias_update, _ = _split_gates(hidden_bias)
    reset_in, update_in, new_in = _split_gates(input_gates)
    return (
        reset_in + jnp.broadcast_to(bias_reset, reset_in.shape),
        update_in + jnp.broadcast_to(bias_update, update_in.shape),
        new_in,
    )


@jax.custom_vjp
def _gru_states(input_gates, hidden_kernel, hidden_bias, mask):
    """[T, B, 3H], [H, 3H], [3H], [T, B] -> states [T, B, H]; a padded step repeats the state."""
    return _gru_states_forward(input_gates, hidden_kernel, hidden_bias, mask)[0]


def _gru_states_forward(input_gates, hidden_kernel, hidden_bias, mask):
    parts = _input_gate_parts(input_gates, hidden_bias)
    new_bias = jnp.broadcast_to(_split_gates(hidden_bias)[2], parts[2].shape[1:])

    def step(h, inputs):
        *step_parts, valid = inputs
        hidden_gates = h @ hidden_kernel
        _, update, _, new = _gates(*step_parts, hidden_gates, new_bias)
        h = jnp.where(valid[..., None], new + update * (h - new), h)
        # h W_h is kept for the backward pass (when differentiating): recomputing it there would
        # cost a [T B, H] x [H, 3H] matmul, storing it one row block per step.
        return h, (h, hidden_gates)

    states, hidden_gates = jax.lax.scan(step, jnp.zeros_like(new_bias), (*parts, mask))[1]
    return states, (input_gates, hidden_kernel, hidden_bias, mask, states, hidden_gates)


def _gru_states_backward(residuals, states_cotangent):
    """Backpropagation through time with one matmul per step (dh_{t-1} needs dgates_t W_h^T).

    Everything that does not depend on the running cotangent is computed for all steps at
    once, outside the loop: the gates (recomputed from the saved states with one large
    matmul) before it, and the kernel gradient sum_t h_{t-1}^T dgates_t (another large
    matmul) after it. Autodiff of the forward scan would instead do a small kernel-gradient
    matmul at every step and save every gate from the forward pass.
    """
    input_gates, hidden_kernel, hidden_bias, mask, states, hidden_gates = residuals
    previous = jnp.concatenate([jnp.zeros_like(states[:1]), states[:-1]], axis=0)
    new_bias = jnp.broadcast_to(_split_gates(hidden_bias)[2], states.shape)
    parts = _input_gate_parts(input_gates, hidden_bias)
    reset, update, hidden_new, new = _gates(*parts, hidden_gates, new_bias)
    # With g the cotangent of h_new = n + z (h - n), the pre-activation cotangents are g times
    # these factors: d a_n = g (1 - z)(1 - n^2), d a_r = d a_n hn r (1 - r),
    # d a_z = g (h - n) z (1 - z), and d hn = d a_n r.
    new_factor = (1 - update) * (1 - jnp.square(new))
    factors = (
        new_factor * hidden_new * reset * (1 - reset),
        (previous - new) * update * (1 - update),
        new_factor * reset,
    )
    kernel_t = hidden_kernel.T

    def hidden_gates_cotangent(g, gate_factors):
        return jnp.concatenate([g * f for f in gate_factors], axis=-1)

    def step(carry, inputs):
        cotangent, valid, step_update, *step_factors = inputs
        valid = valid[..., None]
        total = cotangent + carry
        g = jnp.where(valid, total, jnp.zeros_like(total))
        carry = (
            g * step_update
            + hidden_gates_cotangent(g, step_factors) @ kernel_t
            + jnp.where(valid, jnp.zeros_like(total), total)
        )
        return carry, g

    inputs = (states_cotangent, mask, update, *factors)
    g = jax.lax.scan(step, jnp.zeros_like(states[0]), inputs, reverse=True)[1]
    hidden_cotangent = hidden_gates_cotangent(g, factors)
    input_cotangent = hidden_gates_cotangent(g, factors[:2] + (new_factor,))
    kernel_cotangent = _flatten_steps(previous).T @ _flatten_steps(hidden_cotangent)
    # b_hr, b_hz (folded into the input gates) and b_hn all receive the hidden-gate cotangent.
    bias_cotangent = jnp.sum(hidden_cotangent, axis=(0, 1))
    return input_cotangent, kernel_cotangent, bias_cotangent, None


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
    """One bidirectional GRU layer: a forward and a backward `gru_scan`.

    The backward GRU reads the time-reversed sequence. The input projections of both
    directions are one [T B, D] x [D, 6H] matmul; the backward half is then reversed in time,
    which equals projecting the reversed inputs. With a mask, the backward scan first crosses
    the trailing pads with its state held at zero, so it starts at each sequence's own last
    token.

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
    num_directions, num_inputs, num_gates = input_kernel.shape
    both_kernels = jnp.moveaxis(input_kernel, 0, 1).reshape(num_inputs, num_directions * num_gates)
    gates = _matmul_2d(x, both_kernels)
    gates = gates + jnp.broadcast_to(input_bias.reshape(-1), gates.shape)
    forward = gru_scan(gates[..., :num_gates], hidden_kernel[0], hidden_bias[0], mask)
    reversed_mask = None if mask is None else jnp.flip(mask, axis=0)
    backward = gru_scan(jnp.flip(gates[..., num_gates:], axis=0), hidden_kernel[1], hidden_bias[1], reversed_mask)
    return jnp.stack([forward, jnp.flip(backward, axis=0)], axis=2)


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
