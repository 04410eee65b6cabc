"""Recurrent scans (GRU, LSTM) and the states they end in.

Pure functions on arrays, usable under `jit`, `vmap` and `grad`. Sequences are batch-major,
[..., T, F] with any leading axes (none for one sequence, [B] for a batch), and a `mask`
[..., T]. Inside, the scans read time-major [T, B, F], the layout `lax.scan` walks: the
transposes sit next to elementwise work (the bias of the input projections, the zeroing of
the padded steps) into which XLA fuses them. The input projections of all time steps are one
matmul before the scan, so the loop body holds only the recurrent matmul and the gate math;
a bidirectional GRU's forward pass over many sequences projects inside its loop instead
(`IN_LOOP_PROJECTION_ROWS`), and is differentiated as the others are.

Padding: the `mask` marks real steps. At a padded step the state is carried through
unchanged and the output is zero, so trailing pads never touch the forward direction's valid
outputs, and a backward scan starts at each sequence's own last token. Without a mask every
step is processed (how unmasked reference code treats pads).

References:
    Cho et al. Learning Phrase Representations using RNN Encoder-Decoder for Statistical
        Machine Translation. EMNLP 2014 (eq. 5-8, the GRU).
    PyTorch `torch.nn.GRU` documentation (bias placement: b_hn inside the reset product).
    Hochreiter, Schmidhuber. Long Short-Term Memory. Neural Computation 1997 (the LSTM; the
        forget gate of the form used here is Gers et al. 2000).
    PyTorch `torch.nn.LSTM` documentation (gate order i, f, g, o; two biases per gate).
"""

import math

import jax
import jax.numpy as jnp

from jcaps.ops._arrays import add_bias, merge_leading_axes, split_leading_axes, valid_positions, zero_padding

# ---------------------------------------------------------------------------------------------
# GRU (PyTorch semantics: an input and a hidden bias for every gate)
# ---------------------------------------------------------------------------------------------


def _flatten_steps(x: jax.Array) -> jax.Array:
    """[..., F] -> [prod(...), F]."""
    return x.reshape(-1, x.shape[-1])


def _matmul_2d(x: jax.Array, kernel: jax.Array) -> jax.Array:
    """[..., D] x [D, F] -> [..., F] as one 2-D matmul. With the 3-D contraction, XLA:CPU
    computes the kernel gradient (contracting T and B) with a slow generic dot; in the 2-D form
    value and gradients run 1.4 to 2.3 times faster."""
    return (_flatten_steps(x) @ kernel).reshape(x.shape[:-1] + kernel.shape[-1:])


def _time_major(x: jax.Array) -> jax.Array:
    """[..., T, F] -> [T, B, F], B the product of the leading axes (1 without any)."""
    return jnp.swapaxes(merge_leading_axes(x, 2)[0], 0, 1)


def _time_major_mask(mask: jax.Array | None, steps_shape: tuple[int, ...]) -> jax.Array:
    """mask [..., T] (None: every step is valid) -> [T, B] bool, for sequences of `steps_shape`."""
    return merge_leading_axes(valid_positions(mask, steps_shape), 1)[0].T


def _batch_major(states: jax.Array, batch_shape: tuple[int, ...]) -> jax.Array:
    """[T, B, ...] -> [*batch_shape, T, ...], the inverse of `_time_major`."""
    return split_leading_axes(jnp.swapaxes(states, 0, 1), batch_shape)


def _split_gates(x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """[..., 3H] -> the reset, update and new-gate parts, [..., H] each."""
    reset, update, new = jnp.split(x, 3, axis=-1)
    return reset, update, new


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
    return add_bias(reset_in, bias_reset), add_bias(update_in, bias_update), new_in


@jax.custom_vjp
def _gru_states(input_gates, hidden_kernels, hidden_biases, masks):
    """G independent GRUs advanced by one loop (tuples of G arrays each).

    input_gates [T, B, 3H], hidden_kernels [H, 3H], hidden_biases [3H], masks [T, B] per GRU
    -> states [T, B, H] per GRU; a padded step repeats the previous state.
    """
    return _gru_states_forward(input_gates, hidden_kernels, hidden_biases, masks)[0]


def _new_gate_bias(hidden_bias, shape):
    return jnp.broadcast_to(_split_gates(hidden_bias)[2], shape)


def _gru_states_forward(input_gates, hidden_kernels, hidden_biases, masks):
    parts = tuple(_input_gate_parts(gates, bias) for gates, bias in zip(input_gates, hidden_biases))
    new_biases = tuple(_new_gate_bias(bias, p[2].shape[1:]) for bias, p in zip(hidden_biases, parts))

    def step(states, inputs):
        new_states, hidden_gates = [], []
        for h, kernel, new_bias, (*step_parts, valid) in zip(states, hidden_kernels, new_biases, inputs):
            hidden = h @ kernel
            _, update, _, new = _gates(*step_parts, hidden, new_bias)
            new_states.append(jnp.where(valid[..., None], new + update * (h - new), h))
            hidden_gates.append(hidden)
        # h W_h is kept for the backward pass (when differentiating): recomputing it there would
        # cost a [T B, H] x [H, 3H] matmul, storing it one row block per step.
        return tuple(new_states), (tuple(new_states), tuple(hidden_gates))

    inputs = tuple((*p, mask) for p, mask in zip(parts, masks))
    initial = tuple(jnp.zeros_like(bias) for bias in new_biases)
    states, hidden_gates = jax.lax.scan(step, initial, inputs)[1]
    return states, (input_gates, hidden_kernels, hidden_biases, masks, states, hidden_gates)


def _gate_cotangent_factors(input_gates, hidden_bias, states, hidden_gates):
    """Per step, what the cotangent g of h_new = n + z (h - n) is multiplied by to give the
    cotangents of the pre-activations:

        d a_n = g (1 - z)(1 - n^2),  d a_r = d a_n hn r (1 - r),  d a_z = g (h - n) z (1 - z),
        d hn = d a_n r,  d h_{t-1} (direct) = g z.

    Returns (previous states, (r, z, hn) hidden-gate factors, new-gate input factor, z).
    """
    previous = jnp.concatenate([jnp.zeros_like(states[:1]), states[:-1]], axis=0)
    parts = _input_gate_parts(input_gates, hidden_bias)
    reset, update, hidden_new, new = _gates(*parts, hidden_gates, _new_gate_bias(hidden_bias, states.shape))
    new_factor = (1 - update) * (1 - jnp.square(new))
    hidden_factors = (
        new_factor * hidden_new * reset * (1 - reset),
        (previous - new) * update * (1 - update),
        new_factor * reset,
    )
    return previous, hidden_factors, new_factor, update


def _scale_gates(g, factors):
    """[..., H] cotangent times the three gate factors, concatenated to [..., 3H]."""
    return jnp.concatenate([g * f for f in factors], axis=-1)


def _gru_states_backward(residuals, states_cotangents):
    """Backpropagation through time with one matmul per GRU and step (dh_{t-1} needs
    dgates_t W_h^T).

    Everything that does not depend on the running cotangent is computed for all steps at
    once, outside the loop: the gate factors before it (from the saved states and h W_h), the
    kernel gradient sum_t h_{t-1}^T dgates_t (one large matmul) after it. Autodiff of the
    forward scan would do a small kernel-gradient matmul at every step instead.
    """
    input_gates, hidden_kernels, hidden_biases, masks, states, hidden_gates = residuals
    factors = tuple(map(_gate_cotangent_factors, input_gates, hidden_biases, states, hidden_gates))
    kernels_t = tuple(kernel.T for kernel in hidden_kernels)

    def step(carries, inputs):
        new_carries, gs = [], []
        for carry, kernel_t, (cotangent, valid, update, *hidden_factors) in zip(carries, kernels_t, inputs):
            valid = valid[..., None]
            total = cotangent + carry
            g = jnp.where(valid, total, jnp.zeros_like(total))
            through_pad = jnp.where(valid, jnp.zeros_like(total), total)
            new_carries.append(g * update + _scale_gates(g, hidden_factors) @ kernel_t + through_pad)
            gs.append(g)
        return tuple(new_carries), tuple(gs)

    inputs = tuple(
        (cotangent, mask, update, *hidden_factors)
        for cotangent, mask, (_, hidden_factors, _, update) in zip(states_cotangents, masks, factors)
    )
    initial = tuple(jnp.zeros_like(s[0]) for s in states)
    gs = jax.lax.scan(step, initial, inputs, reverse=True)[1]

    input_cotangents, kernel_cotangents, bias_cotangents = [], [], []
    for g, (previous, hidden_factors, new_factor, _) in zip(gs, factors):
        hidden_cotangent = _scale_gates(g, hidden_factors)
        input_cotangents.append(_scale_gates(g, hidden_factors[:2] + (new_factor,)))
        kernel_cotangents.append(_flatten_steps(previous).T @ _flatten_steps(hidden_cotangent))
        # b_hr, b_hz (folded into the input gates) and b_hn all get the hidden-gate cotangent.
        bias_cotangents.append(jnp.sum(hidden_cotangent, axis=(0, 1)))
    return tuple(input_cotangents), tuple(kernel_cotangents), tuple(bias_cotangents), None


_gru_states.defvjp(_gru_states_forward, _gru_states_backward)


def gru_scan(
    input_gates: jax.Array,
    hidden_kernel: jax.Array,
    hidden_bias: jax.Array,
    *,
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
        input_gates: [..., T, 3H] = x_t W_i + b_i for every step, gates in the order (r, z, n).
        hidden_kernel: [H, 3H] = W_h, same gate order.
        hidden_bias: [3H] = b_h.
        mask: optional [..., T] bool; padded steps keep the state and output zeros.

    Returns:
        [..., T, H] hidden states h_1..h_T (zero at padded steps).

    Example:
        Two sequences of H = 2 states, the second one two steps long:

        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> from jcaps.ops.recurrent import gru_scan
        >>> input_gates = jnp.ones((2, 4, 6))  # [B, T, 3H]
        >>> mask = jnp.array([[True, True, True, True], [True, True, False, False]])
        >>> states = gru_scan(input_gates, jnp.zeros((2, 6)), jnp.zeros(6), mask=mask)
        >>> states.shape
        (2, 4, 2)
        >>> print(np.asarray(states[:, :, 0]).round(3))
        [[0.205 0.355 0.464 0.544]
         [0.205 0.355 0.    0.   ]]
        >>> gru_scan(input_gates[0], jnp.zeros((2, 6)), jnp.zeros(6)).shape  # one sequence
        (4, 2)
    """
    valid = _time_major_mask(mask, input_gates.shape[:-1])
    [states] = _gru_states((_time_major(input_gates),), (hidden_kernel,), (hidden_bias,), (valid,))
    return zero_padding(_batch_major(states, input_gates.shape[:-2]), mask)


def bidirectional_gru(
    x: jax.Array,
    input_kernel: jax.Array,
    input_bias: jax.Array,
    hidden_kernel: jax.Array,
    hidden_bias: jax.Array,
    *,
    mask: jax.Array | None = None,
) -> jax.Array:
    """One bidirectional GRU layer: a forward and a backward `gru_scan`, advanced by one loop.

    The backward GRU reads the time-reversed sequence. The input projections of both
    directions are one [B T, D] x [D, 6H] matmul; the backward half is then reversed in time,
    which equals projecting the reversed inputs. Both directions share the loop (one
    `lax.scan`, two matmuls per step), which halves the loops XLA compiles. With a mask, the
    backward GRU first crosses the trailing pads with its state held at zero, so it starts at
    each sequence's own last token.

    Args:
        x: [..., T, D] inputs.
        input_kernel: [2, D, 3H] W_i of the (forward, backward) directions, gates (r, z, n).
        input_bias: [2, 3H].
        hidden_kernel: [2, H, 3H].
        hidden_bias: [2, 3H].
        mask: optional [..., T] bool.

    Returns:
        [..., T, 2, H]: forward and backward hidden states at each step (zero at padded steps);
        a reshape to [..., T, 2H] is PyTorch's concatenated output.

    Example:
        The backward direction of a padded sequence starts at its own last step: the second
        sequence, one step long, gets the state the first one gets from its last input alone.

        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> from jcaps.ops.recurrent import bidirectional_gru
        >>> D, H = 1, 2
        >>> input_kernel, input_bias = jnp.full((2, D, 3 * H), 0.5), jnp.zeros((2, 3 * H))
        >>> hidden_kernel, hidden_bias = jnp.zeros((2, H, 3 * H)), jnp.zeros((2, 3 * H))
        >>> x = jnp.array([[[1.0], [2.0], [3.0]], [[3.0], [0.0], [0.0]]])  # [B, T, D]
        >>> mask = jnp.array([[True, True, True], [True, False, False]])
        >>> states = bidirectional_gru(x, input_kernel, input_bias, hidden_kernel, hidden_bias, mask=mask)
        >>> states.shape
        (2, 3, 2, 2)
        >>> print(np.asarray(states[:, :, :, 0]).round(3))  # [B, T, direction]
        [[[0.174 0.377]
          [0.332 0.326]
          [0.437 0.165]]
        <BLANKLINE>
         [[0.165 0.165]
          [0.    0.   ]
          [0.    0.   ]]]
    """
    rows = math.prod(x.shape[:-2])
    if rows >= IN_LOOP_PROJECTION_ROWS:
        return _bidirectional_gru_projecting_in_loop(x, input_kernel, input_bias, hidden_kernel, hidden_bias, mask)
    return _bidirectional(_gru_states, x, input_kernel, input_bias, hidden_kernel, hidden_bias, mask)


# From this many sequences a step, a bidirectional GRU's forward pass projects each step's input
# inside the loop instead of all steps before it: the [T, B, 6H] input gates are never written
# out, and a [B, D] x [D, 3H] product a step stays in cache; below it, the one large product is as
# fast or faster (XLA:CPU; benchmarks/gru_input_projection.py).
IN_LOOP_PROJECTION_ROWS = 128


@jax.custom_vjp
def _bidirectional_gru_projecting_in_loop(x, input_kernel, input_bias, hidden_kernel, hidden_bias, mask):
    """`bidirectional_gru` with each step's input projected inside the loop. Differentiated, it
    runs as `bidirectional_gru` does below `IN_LOOP_PROJECTION_ROWS` (its backward pass needs
    every step's input gates anyway)."""
    x_steps = _time_major(x)
    valid = _time_major_mask(mask, x.shape[:-1])
    new_biases = tuple(_new_gate_bias(bias, (x_steps.shape[1], hidden_kernel.shape[1])) for bias in hidden_bias)
    # Per direction: the (r, z, n) input kernels, and their biases with b_hr and b_hz folded in.
    projections = tuple(
        tuple(zip(_split_gates(input_kernel[d]), _input_gate_parts(input_bias[d], hidden_bias[d]))) for d in range(2)
    )

    def step(states, inputs):
        new_states = []
        for h, kernel, new_bias, parts, (x_t, valid_t) in zip(states, hidden_kernel, new_biases, projections, inputs):
            step_parts = [add_bias(x_t @ w, b) for w, b in parts]
            _, update, _, new = _gates(*step_parts, h @ kernel, new_bias)
            new_states.append(jnp.where(valid_t[..., None], new + update * (h - new), h))
        return tuple(new_states), tuple(new_states)

    initial = tuple(jnp.zeros_like(b) for b in new_biases)
    inputs = ((x_steps, valid), (jnp.flip(x_steps, axis=0), jnp.flip(valid, axis=0)))
    forward, backward = jax.lax.scan(step, initial, inputs)[1]
    states = jnp.stack([forward, jnp.flip(backward, axis=0)], axis=2)
    return zero_padding(_batch_major(states, x.shape[:-2]), mask)


def _projecting_in_loop_forward(x, input_kernel, input_bias, hidden_kernel, hidden_bias, mask):
    def layer(*arrays):
        return _bidirectional(_gru_states, *arrays, mask)

    # jax.vjp's function is a pytree of its residuals: the backward pass runs through the
    # projection before the loop and `_gru_states`, as `bidirectional_gru`'s does for fewer rows.
    states, pullback = jax.vjp(layer, x, input_kernel, input_bias, hidden_kernel, hidden_bias)
    return states, pullback


def _projecting_in_loop_backward(pullback, cotangent):
    return (*pullback(cotangent), None)  # the mask has no cotangent


_bidirectional_gru_projecting_in_loop.defvjp(_projecting_in_loop_forward, _projecting_in_loop_backward)


def _bidirectional(states_fn, x, input_kernel, input_bias, hidden_kernel, hidden_bias, mask):
    """Both directions of a recurrent layer through `states_fn` (`_gru_states` or `_lstm_states`,
    which advance several recurrences in one loop): one input-projection matmul for both, the
    backward half reversed in time, states [..., T, 2, H] zero at padded steps."""
    num_directions, num_inputs, num_gates = input_kernel.shape
    both_kernels = jnp.moveaxis(input_kernel, 0, 1).reshape(num_inputs, num_directions * num_gates)
    # Projected in the caller's layout and transposed with the bias added (one fused pass).
    gates = _matmul_2d(x, both_kernels)
    gates = _time_major(add_bias(gates, input_bias.reshape(-1)))
    valid = _time_major_mask(mask, x.shape[:-1])
    forward, backward = states_fn(
        (gates[..., :num_gates], jnp.flip(gates[..., num_gates:], axis=0)),
        (hidden_kernel[0], hidden_kernel[1]),
        (hidden_bias[0], hidden_bias[1]),
        (valid, jnp.flip(valid, axis=0)),
    )
    states = jnp.stack([forward, jnp.flip(backward, axis=0)], axis=2)
    return zero_padding(_batch_major(states, x.shape[:-2]), mask)


# ---------------------------------------------------------------------------------------------
# LSTM (PyTorch semantics: gate order i, f, g, o; an input and a hidden bias for every gate)
# ---------------------------------------------------------------------------------------------


def _lstm_update(pre_activations: jax.Array, c: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The LSTM gate math from the summed pre-activations [..., 4H] (i, f, g, o) and c_{t-1}
    [..., H] -> (h_t, c_t); the one place it is written, for the scans and `lstm_cell`."""
    in_gate, forget_gate, cell_gate, out_gate = jnp.split(pre_activations, 4, axis=-1)
    new_c = jax.nn.sigmoid(forget_gate) * c + jax.nn.sigmoid(in_gate) * jnp.tanh(cell_gate)
    return jax.nn.sigmoid(out_gate) * jnp.tanh(new_c), new_c


def lstm_cell(
    input_gates: jax.Array,
    h: jax.Array,
    c: jax.Array,
    hidden_kernel: jax.Array,
    hidden_bias: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """One LSTM step (the equations of `lstm_scan`), for loops that build x_t from the
    previous step's outputs (decoders) and so cannot project all inputs beforehand.

    Args:
        input_gates: [..., 4H] = x_t W_i + b_i, gates in the order (i, f, g, o).
        h: [..., H] h_{t-1}.
        c: [..., H] c_{t-1}.
        hidden_kernel: [H, 4H] = W_h.
        hidden_bias: [4H] = b_h.

    Returns:
        (h_t, c_t), [..., H] each.

    Example:
        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> from jcaps.ops.recurrent import lstm_cell
        >>> h = c = jnp.zeros((2, 3))  # [B, H]
        >>> h, c = lstm_cell(jnp.ones((2, 12)), h, c, jnp.zeros((3, 12)), jnp.zeros(12))
        >>> print(np.asarray(h).round(3))
        [[0.37 0.37 0.37]
         [0.37 0.37 0.37]]
        >>> print(np.asarray(c).round(3))
        [[0.557 0.557 0.557]
         [0.557 0.557 0.557]]
    """
    return _lstm_update(add_bias(input_gates + h @ hidden_kernel, hidden_bias), c)


def _lstm_states(input_gates, hidden_kernels, hidden_biases, masks):
    """G independent LSTMs advanced by one loop (tuples of G arrays each).

    input_gates [T, B, 4H], hidden_kernels [H, 4H], hidden_biases [4H], masks [T, B] per LSTM
    -> hidden states [T, B, H] per LSTM; a padded step keeps h and c.
    """
    # b_h only adds to the gate pre-activations, so it is added once for all steps.
    gates = tuple(map(add_bias, input_gates, hidden_biases))

    def step(carries, inputs):
        new_carries, outputs = [], []
        for (h, c), kernel, (step_gates, valid) in zip(carries, hidden_kernels, inputs):
            new_h, new_c = _lstm_update(step_gates + h @ kernel, c)
            valid = valid[..., None]
            new_carries.append((jnp.where(valid, new_h, h), jnp.where(valid, new_c, c)))
            outputs.append(new_h)
        return tuple(new_carries), tuple(outputs)

    initial = tuple((jnp.zeros(g.shape[1:2] + k.shape[:1], g.dtype),) * 2 for g, k in zip(gates, hidden_kernels))
    return jax.lax.scan(step, initial, tuple(zip(gates, masks)))[1]


def lstm_scan(
    input_gates: jax.Array,
    hidden_kernel: jax.Array,
    hidden_bias: jax.Array,
    *,
    mask: jax.Array | None = None,
) -> jax.Array:
    """An LSTM over time, from precomputed input projections (PyTorch's `nn.LSTM` cell).

        i_t = sigmoid(W_ii x_t + b_ii + W_hi h_{t-1} + b_hi)
        f_t = sigmoid(W_if x_t + b_if + W_hf h_{t-1} + b_hf)
        g_t = tanh(W_ig x_t + b_ig + W_hg h_{t-1} + b_hg)
        o_t = sigmoid(W_io x_t + b_io + W_ho h_{t-1} + b_ho)
        c_t = f_t * c_{t-1} + i_t * g_t,   h_t = o_t * tanh(c_t),   h_0 = c_0 = 0

    The loop body holds one [B, H] x [H, 4H] matmul and the gate math; gradients are JAX's
    autodiff of the scan.

    Args:
        input_gates: [..., T, 4H] = x_t W_i + b_i for every step, gates in the order (i, f, g, o).
        hidden_kernel: [H, 4H] = W_h, same gate order.
        hidden_bias: [4H] = b_h.
        mask: optional [..., T] bool; padded steps keep the state (h and c) and output zeros.

    Returns:
        [..., T, H] hidden states h_1..h_T (zero at padded steps).

    Example:
        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> from jcaps.ops.recurrent import lstm_scan
        >>> input_gates = jnp.ones((2, 3, 8))  # [B, T, 4H], H = 2
        >>> mask = jnp.array([[True, True, True], [True, False, False]])
        >>> states = lstm_scan(input_gates, jnp.zeros((2, 8)), jnp.zeros(8), mask=mask)
        >>> print(np.asarray(states[:, :, 0]).round(3))
        [[0.37  0.545 0.622]
         [0.37  0.    0.   ]]
        >>> lstm_scan(input_gates[0], jnp.zeros((2, 8)), jnp.zeros(8)).shape  # one sequence
        (3, 2)
    """
    valid = _time_major_mask(mask, input_gates.shape[:-1])
    [states] = _lstm_states((_time_major(input_gates),), (hidden_kernel,), (hidden_bias,), (valid,))
    return zero_padding(_batch_major(states, input_gates.shape[:-2]), mask)


def bidirectional_lstm(
    x: jax.Array,
    input_kernel: jax.Array,
    input_bias: jax.Array,
    hidden_kernel: jax.Array,
    hidden_bias: jax.Array,
    *,
    mask: jax.Array | None = None,
) -> jax.Array:
    """One bidirectional LSTM layer: a forward and a backward `lstm_scan`, advanced by one loop.

    Laid out as `bidirectional_gru`: the input projections of both directions are one
    [B T, D] x [D, 8H] matmul, the backward half is reversed in time (equal to projecting the
    reversed inputs), and both directions share one `lax.scan`. With a mask, the backward LSTM
    first crosses the trailing pads with its state held at zero, so it starts at each
    sequence's own last token.

    Args:
        x: [..., T, D] inputs.
        input_kernel: [2, D, 4H] W_i of the (forward, backward) directions, gates (i, f, g, o).
        input_bias: [2, 4H].
        hidden_kernel: [2, H, 4H].
        hidden_bias: [2, 4H].
        mask: optional [..., T] bool.

    Returns:
        [..., T, 2, H]: forward and backward hidden states at each step (zero at padded steps);
        a reshape to [..., T, 2H] is PyTorch's concatenated output.

    Example:
        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> from jcaps.ops.recurrent import bidirectional_lstm
        >>> D, H = 3, 2
        >>> input_kernel, input_bias = jnp.full((2, D, 4 * H), 0.1), jnp.zeros((2, 4 * H))
        >>> hidden_kernel, hidden_bias = jnp.zeros((2, H, 4 * H)), jnp.zeros((2, 4 * H))
        >>> x = jnp.ones((4, 5, D))  # [B, T, D]
        >>> mask = jnp.arange(5)[None, :] < jnp.array([[5], [3], [1], [0]])
        >>> states = bidirectional_lstm(x, input_kernel, input_bias, hidden_kernel, hidden_bias, mask=mask)
        >>> states.shape  # [B, T, 2, H]
        (4, 5, 2, 2)
        >>> # The backward state at the first step, after 5, 3, 1 and no steps:
        >>> print(np.asarray(states[:, 0, 1, 0]).round(3))
        [0.203 0.177 0.095 0.   ]
    """
    return _bidirectional(_lstm_states, x, input_kernel, input_bias, hidden_kernel, hidden_bias, mask)


def _state_at_one_step(states: jax.Array, mask: jax.Array, last: bool) -> jax.Array:
    """states [..., T, ...] at the last (or first) valid step of mask [..., T] -> [..., ...];
    zero for a sequence with no valid step."""
    steps = jax.lax.broadcasted_iota(jnp.int32, mask.shape, mask.ndim - 1)
    if last:
        chosen = jnp.max(jnp.where(mask, steps, -1), axis=-1, keepdims=True)
    else:
        chosen = jnp.min(jnp.where(mask, steps, mask.shape[-1]), axis=-1, keepdims=True)
    # A sum over a one-hot time mask rather than a gather: no index clipping for an all-padded
    # sequence (no step is chosen and the sum is zero).
    return jnp.sum(zero_padding(states, steps == chosen), axis=mask.ndim - 1)


def last_valid_state(states: jax.Array, *, mask: jax.Array | None = None) -> jax.Array:
    """The state at each sequence's last valid step.

    Args:
        states: [..., T, H] states.
        mask: optional [..., T] bool; None takes step T.

    Returns:
        [..., H]; zero for a sequence with no valid step.

    Example:
        >>> import jax.numpy as jnp
        >>> from jcaps.ops.recurrent import last_valid_state
        >>> states = jnp.arange(12.0).reshape(2, 3, 2)  # [B, T, H]
        >>> mask = jnp.array([[True, True, False], [False, False, False]])
        >>> print(last_valid_state(states, mask=mask))
        [[2. 3.]
         [0. 0.]]
    """
    if mask is None:
        return states[..., -1, :]
    return _state_at_one_step(states, jnp.asarray(mask), last=True)


def bidirectional_final_state(states: jax.Array, *, mask: jax.Array | None = None) -> jax.Array:
    """Each direction's state after it has read the whole sequence: the forward state at the
    last valid step and the backward state at the first valid step, concatenated (PyTorch's
    final hidden states h_n of both directions).

    Args:
        states: [..., T, 2, H] of `bidirectional_gru` or `bidirectional_lstm`.
        mask: optional [..., T] bool; None takes the forward state at step T and the backward
            one at step 1.

    Returns:
        [..., 2H]; zero for a sequence with no valid step.

    Example:
        >>> import jax.numpy as jnp
        >>> from jcaps.ops.recurrent import bidirectional_final_state
        >>> states = jnp.arange(12.0).reshape(3, 2, 2)  # one sequence: [T, 2, H]
        >>> print(bidirectional_final_state(states, mask=jnp.array([False, True, True])))
        [8. 9. 6. 7.]
    """
    forward, backward = states[..., 0, :], states[..., 1, :]
    if mask is None:
        return jnp.concatenate([forward[..., -1, :], backward[..., 0, :]], axis=-1)
    mask = jnp.asarray(mask)
    return jnp.concatenate(
        [_state_at_one_step(forward, mask, last=True), _state_at_one_step(backward, mask, last=False)], axis=-1
    )
