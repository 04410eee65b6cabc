"""One LSTM layer through cuDNN's fused kernel (`jax.experimental.rnn.lstm`): what
`RecurrentLayer("lstm")` runs with `rnn_impl="cudnn"` on a GPU.

The parameters stay `RecurrentLayer`'s tree (input_kernel [K, D, 4H], input_bias [K, 4H],
hidden_kernel [K, H, 4H], hidden_bias [K, 4H], gates i, f, g, o); each call packs them into the
flat float32 vector cuDNN reads (`to_cudnn_weights`), so gradients flow back to the same tree
and a checkpoint is the same whichever implementation trained it. cuDNN's layout (PyTorch's
W_ih [4H, D], W_hh [4H, H], b_ih, b_hh per direction, same gate order) is the module docstring
of `jax.experimental.rnn`: the matrices of every direction first, then the biases.

Masks become per-sequence lengths. jcaps' masks are prefix masks (trailing pads), for which
cuDNN computes what the scans do: a backward direction starts at each sequence's own last
step, and the states at padded steps are zero.

cuDNN exists only on a GPU backend, and JAX's binding takes float32 only; elsewhere
`cudnn_unavailable` says why and `RecurrentLayer` runs the scan, with one warning.
"""

import functools
import warnings

import jax
import jax.numpy as jnp
from jax.experimental import rnn


def cudnn_unavailable(dtype) -> str | None:
    """Why the cuDNN LSTM cannot run activations of `dtype` here; None when it can."""
    backend = jax.default_backend()
    if backend != "gpu":
        return f"JAX's default backend is {backend}, not a GPU"
    if jnp.dtype(dtype) != jnp.float32:
        return f"JAX's cuDNN LSTM takes float32 activations, not {jnp.dtype(dtype).name}"
    return None


@functools.cache
def warn_scan_fallback(reason: str) -> None:
    """One line per process (and reason) that rnn_impl='cudnn' runs the scan instead: a warning,
    which the training commands' quietened absl logging would hide."""
    warnings.warn(f"model.rnn_impl='cudnn': {reason}, so the LSTM layers run the scan.", stacklevel=2)


def to_cudnn_weights(
    input_kernel: jax.Array, input_bias: jax.Array, hidden_kernel: jax.Array, hidden_bias: jax.Array
) -> jax.Array:
    """`RecurrentLayer`'s LSTM parameters -> cuDNN's flat weight vector of one layer.

    input_kernel [K, D, 4H], input_bias [K, 4H], hidden_kernel [K, H, 4H], hidden_bias [K, 4H]
    -> [get_num_params_in_lstm(D, H, 1, K == 2)]: W_ih^k = input_kernel[k].T and
    W_hh^k = hidden_kernel[k].T for each direction k, then b_ih^k, b_hh^k for each.
    """
    directions = range(input_kernel.shape[0])
    matrices = [m for k in directions for m in (input_kernel[k].T, hidden_kernel[k].T)]
    biases = [b for k in directions for b in (input_bias[k], hidden_bias[k])]
    return jnp.concatenate([m.reshape(-1) for m in matrices] + biases)


def from_cudnn_weights(
    weights: jax.Array, input_size: int, hidden_size: int, num_directions: int
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """cuDNN's flat weight vector of one layer -> (input_kernel [K, D, 4H], input_bias [K, 4H],
    hidden_kernel [K, H, 4H], hidden_bias [K, 4H]), the inverse of `to_cudnn_weights` (for
    weights trained with `jax.experimental.rnn`)."""
    w_ih, w_hh, b_ih, b_hh = rnn.unpack_lstm_weights(weights, input_size, hidden_size, 1, num_directions == 2)
    directions = range(num_directions)
    return (
        jnp.stack([w_ih[k].T for k in directions]),
        jnp.stack([b_ih[k] for k in directions]),
        jnp.stack([w_hh[k].T for k in directions]),
        jnp.stack([b_hh[k] for k in directions]),
    )


def sequence_lengths(mask: jax.Array | None, batch: int, steps: int) -> jax.Array:
    """Prefix mask [B, T] (None: all valid) -> [B] int32 lengths, at least 1: cuDNN needs
    every sequence to have a step, and the caller zeroes the outputs of empty ones."""
    if mask is None:
        return jnp.full((batch,), steps, jnp.int32)
    return jnp.maximum(jnp.sum(mask, axis=-1, dtype=jnp.int32), jnp.ones((batch,), jnp.int32))


def cudnn_lstm_layer(
    x: jax.Array,
    mask: jax.Array | None,
    input_kernel: jax.Array,
    input_bias: jax.Array,
    hidden_kernel: jax.Array,
    hidden_bias: jax.Array,
) -> jax.Array:
    """One LSTM layer of K directions through cuDNN; same values as `RecurrentLayer`'s scans.

    x [..., T, D] float32, mask [..., T] bool prefix mask (True at real steps) or None, the
    parameters as `to_cudnn_weights` takes them -> [..., T, K, H] states of each direction in
    input time order, zero at padded steps. The leading axes are merged into cuDNN's one batch
    axis (its primitive has no batching rule, so this path does not run under `vmap`).
    """
    num_directions, input_size, num_gates = input_kernel.shape
    hidden_size = num_gates // 4
    lead, steps = x.shape[:-2], x.shape[-2]
    batch_x = x.reshape((-1, steps, input_size))
    batch = batch_x.shape[0]
    batch_mask = None if mask is None else mask.reshape((batch, steps))
    if batch_mask is not None:
        # Pads may hold anything (NaN included); zeros keep them out of the padded sequences
        # cuDNN reads whole, the empty ones (length 1 here).
        batch_x = jnp.where(batch_mask[..., None], batch_x, jnp.zeros_like(batch_x))
    initial = jnp.zeros((num_directions, batch, hidden_size), x.dtype)
    states, _, _ = rnn.lstm(
        batch_x,
        initial,
        initial,
        to_cudnn_weights(input_kernel, input_bias, hidden_kernel, hidden_bias),
        sequence_lengths(batch_mask, batch, steps),
        input_size=input_size,
        hidden_size=hidden_size,
        num_layers=1,
        dropout=0.0,
        bidirectional=num_directions == 2,
    )
    if batch_mask is not None:
        states = jnp.where(batch_mask[..., None], states, jnp.zeros_like(states))
    return states.reshape(lead + (steps, num_directions, hidden_size))
