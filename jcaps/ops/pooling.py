"""Pooling over time: masked means and maxima, and input-cell attention's causal softmax pooling.

Pure functions on arrays, usable under `jit`, `vmap` and `grad`. Sequences are batch-major,
[..., T, F] with any leading batch axes (none for a single sequence), with a mask [..., T] that
is True at real positions: padding never enters a pooled value, whatever it holds.

References:
  Ismail, Gunady, Pessoa, Corrada Bravo, Feizi. Input-Cell Attention Reduces Vanishing
  Saliency of Recurrent Neural Networks. NeurIPS 2019 (Sec. 4, input-cell attention).
"""

import jax
import jax.numpy as jnp

from jcaps.ops._arrays import (
    merge_leading_axes,
    normalisation_dtype,
    split_leading_axes,
    valid_positions,
    zero_padding,
)
from jcaps.ops.attention import masked_softmax

# ---------------------------------------------------------------------------------------------
# Pooling over time
# ---------------------------------------------------------------------------------------------


def masked_mean_over_time(x: jax.Array, *, mask: jax.Array | None = None) -> jax.Array:
    """Mean over the valid steps, `sum_t mask_t x_t / max(sum_t mask_t, 1)`.

    Args:
        x: [..., T, F] values.
        mask: optional [..., T] bool; None averages over all T steps.

    Returns:
        [..., F]; zero for a sequence with no valid step.

    Example:
        >>> import jax.numpy as jnp
        >>> from jcaps.ops.pooling import masked_mean_over_time
        >>> x = jnp.array([[[1.0], [3.0], [100.0]], [[5.0], [7.0], [9.0]]])  # [B, T, F]
        >>> print(masked_mean_over_time(x, mask=jnp.array([[True, True, False], [True, True, True]])))
        [[2.]
         [7.]]
    """
    if mask is None:
        return jnp.mean(x, axis=-2)
    count = jnp.sum(mask, axis=-1, keepdims=True).astype(x.dtype)
    return jnp.sum(zero_padding(x, mask), axis=-2) / jnp.maximum(count, 1)


def masked_max_over_time(x: jax.Array, *, mask: jax.Array | None = None) -> jax.Array:
    """Maximum over the valid steps; padding never wins, whatever it holds.

    Args:
        x: [..., T, F] values.
        mask: optional [..., T] bool; None takes the maximum over all T steps.

    Returns:
        [..., F]; zero for a sequence with no valid step.

    Example:
        >>> import jax.numpy as jnp
        >>> from jcaps.ops.pooling import masked_max_over_time
        >>> x = jnp.array([[1.0, -2.0], [3.0, 5.0], [jnp.nan, 9.0]])  # one sequence: [T, F]
        >>> print(masked_max_over_time(x, mask=jnp.array([True, True, False])))
        [3. 5.]
    """
    if mask is None:
        return jnp.max(x, axis=-2)
    valid = jnp.asarray(mask)[..., None]
    maximum = jnp.max(jnp.where(valid, x, -jnp.inf), axis=-2)
    return jnp.where(jnp.any(valid, axis=-2), maximum, jnp.zeros_like(maximum))


# ---------------------------------------------------------------------------------------------
# Causal softmax pooling (input-cell attention)
# ---------------------------------------------------------------------------------------------


def _time_major(x: jax.Array) -> jax.Array:
    """[B, T, ...] <-> [T, B, ...]: the scan runs over the leading axis."""
    return jnp.swapaxes(x, 0, 1)


def _pool_step(carry, step_inputs):
    """One step of the streaming softmax: (M, Z, P) [B, r], [B, r], [B, r, N] after one more
    position (logits [B, r], input [B, N], valid [B]); a padded position leaves them as they
    are. M is -inf until the first valid position."""
    running_max, total, weighted = carry
    logits, x, valid = step_inputs
    logits = jnp.where(valid[:, None], logits, -jnp.inf)
    new_max = jnp.maximum(running_max, logits)
    # While the max is still -inf every term is 0, and any finite shift keeps exp from NaN.
    shift = jnp.where(jnp.isfinite(new_max), new_max, 0)
    decay, weight = jnp.exp(running_max - shift), jnp.exp(logits - shift)
    total = decay * total + weight
    weighted = decay[..., None] * weighted + weight[..., None] * x[:, None, :]
    return new_max, total, weighted


def _initial_pool_carry(logits, inputs):
    """(M, Z, P) before any position: -inf, 0, 0."""
    return (
        jnp.full(logits.shape[1:], -jnp.inf, logits.dtype),
        jnp.zeros(logits.shape[1:], logits.dtype),
        jnp.zeros(logits.shape[1:] + inputs.shape[-1:], inputs.dtype),
    )


def _positive_or_one(total):
    return jnp.where(total > 0, total, 1)


@jax.custom_vjp
def _streaming_pool(logits, inputs, valid):
    """Time-major `causal_softmax_pool`: logits [T, B, r], inputs [T, B, N], valid [T, B] ->
    [T, B, N]."""
    return _streaming_pool_forward(logits, inputs, valid)[0]


def _streaming_pool_forward(logits, inputs, valid):
    # Zeroed padded inputs: exp(-inf) = 0 times a NaN input would still be NaN.
    inputs = jnp.where(valid[..., None], inputs, 0)

    def step(carry, step_inputs):
        carry = _pool_step(carry, step_inputs)
        running_max, total, weighted = carry
        pooled = jnp.mean(weighted / _positive_or_one(total)[..., None], axis=-2)
        pooled = jnp.where(step_inputs[2][:, None], pooled, 0)
        return carry, (pooled, running_max, total)

    pooled, running_max, total = jax.lax.scan(step, _initial_pool_carry(logits, inputs), (logits, inputs, valid))[1]
    return pooled, (logits, inputs, valid, running_max, total)


def _streaming_pool_backward(residuals, pooled_cotangent):
    """With e_j = exp(s_j - M_j), Z_t, P_t, M_t the carries after step t (per hop) and
    g_t = v_t dL/dm_t / r (v_t: step t valid), the gradients are

        dL/dx_j = v_j sum_k e_jk R_jk,   dL/ds_jk = v_j e_jk (x_j . R_jk - Q_jk),   where
        R_j = sum_{t >= j} exp(M_j - M_t) g_t / Z_t           [B, r, N]
        Q_j = sum_{t >= j} exp(M_j - M_t) g_t . P_t / Z_t^2   [B, r]

    R and Q follow R_j = g_j / Z_j + exp(M_j - M_{j+1}) R_{j+1} (likewise Q): one reverse
    scan, with factors exp(M_j - M_{j+1}) <= 1. g_t . P_t needs the carries P_t again; a
    forward scan recomputes them and emits only that [B, r] product.
    """
    logits, inputs, valid, running_max, total = residuals
    num_hops = logits.shape[-1]
    g = jnp.where(valid[..., None], pooled_cotangent, 0) / num_hops
    # v_t / Z_t; Z_t >= 1 at a valid step (the maximal term is exp(0)).
    inverse_total = jnp.where(valid[..., None], 1 / _positive_or_one(total), 0)

    def recompute_step(carry, step_inputs):
        *pool_inputs, step_g, step_inverse_total = step_inputs
        carry = _pool_step(carry, pool_inputs)
        projected = jnp.einsum("bn,brn->br", step_g, carry[2])
        return carry, projected * jnp.square(step_inverse_total)

    recompute_inputs = (logits, inputs, valid, g, inverse_total)
    projected = jax.lax.scan(recompute_step, _initial_pool_carry(logits, inputs), recompute_inputs)[1]

    shift = jnp.where(jnp.isfinite(running_max), running_max, 0)
    # exp(M_j - M_{j+1}); 0 while no position is valid yet (M_j = -inf). The last step's
    # factor multiplies the zero initial carry.
    decay = jnp.exp(running_max - jnp.concatenate([shift[1:], shift[-1:]], axis=0))
    weights = jnp.exp(jnp.where(valid[..., None], logits, -jnp.inf) - shift)

    def reverse_step(carry, step_inputs):
        pooled_sum, projected_sum = carry
        step_decay, step_g, step_inverse_total, step_projected, step_weights, x, step_valid = step_inputs
        pooled_sum = step_decay[..., None] * pooled_sum + step_inverse_total[..., None] * step_g[:, None, :]
        projected_sum = step_decay * projected_sum + step_projected
        input_cotangent = jnp.einsum("br,brn->bn", step_weights, pooled_sum)
        score_cotangent = step_weights * (jnp.einsum("bn,brn->br", x, pooled_sum) - projected_sum)
        step_valid = step_valid[:, None]
        return (pooled_sum, projected_sum), (
            jnp.where(step_valid, input_cotangent, 0),
            jnp.where(step_valid, score_cotangent, 0),
        )

    _, zero_projected, zero_pooled = _initial_pool_carry(logits, inputs)
    initial = (zero_pooled, zero_projected)
    reverse_inputs = (decay, g, inverse_total, projected, weights, inputs, valid)
    input_cotangent, score_cotangent = jax.lax.scan(reverse_step, initial, reverse_inputs, reverse=True)[1]
    return score_cotangent, input_cotangent, None


_streaming_pool.defvjp(_streaming_pool_forward, _streaming_pool_backward)


def causal_softmax_pool(logits: jax.Array, inputs: jax.Array, *, mask: jax.Array | None = None) -> jax.Array:
    """The input-cell attention of every prefix: a causal softmax pooling of the inputs.

        A_t[k, j] = softmax_{j <= t}(s[j, k])                 (per hop k; padded j get 0)
        m_t       = (1/r) sum_k sum_{j <= t} A_t[k, j] x_j

    for all t in one pass over time, O(T) in time and memory: a scan carries, per hop, the
    running maximum M of the logits, Z = sum_j exp(s_j - M) and P = sum_j exp(s_j - M) x_j
    ([B, r, N]); when M grows, Z and P are rescaled by exp(M_old - M_new) <= 1, so no
    exponent is positive and logits of any magnitude are safe. m_t = mean_k P_k / Z_k.

    A hand-written VJP keeps the gradient O(T) as well: autodiff of the scan would store the
    [B, r, N] carry of every step. The backward pass instead recomputes the carries in a
    second forward scan (emitting only [B, r] per step) and runs one reverse scan. Being a
    custom VJP, it supports reverse-mode differentiation only (no `jax.jvp`, `jax.jacfwd`).

    Padding: padded positions never enter (their logits and inputs may hold anything, even
    inf or NaN, and get zero gradient), and m_t = 0 at a padded step t, as the recurrent ops
    output zeros there. A valid step pools the valid positions j <= t, wherever the pads are.
    `causal_softmax_pool_quadratic` is the same function computed from the [T, T] weights.
    Narrow inputs (bfloat16, float16) are pooled with float32 carries, so Z and P do not lose
    the early steps over long sequences; the output has the inputs' dtype.

    Args:
      logits: [..., T, r] attention logits s (one per hop and position, before the softmax), independent of t.
      inputs: [..., T, N] the vectors x_j that are pooled.
      mask: optional [..., T], True at real positions.

    Returns:
      [..., T, N] m_t for every step t (zero at padded steps).

    Example:
      One sequence (no batch axis) of T = 4 steps, the last one padding; with equal logits m_t is
      the mean of the inputs up to t:

      >>> import jax.numpy as jnp
      >>> import numpy as np
      >>> from jcaps.ops import causal_softmax_pool
      >>> logits = jnp.zeros((4, 1))  # [T, r]
      >>> inputs = jnp.arange(4.0)[:, None]  # [T, N]: x_j = j
      >>> pooled = causal_softmax_pool(logits, inputs, mask=jnp.array([True, True, True, False]))
      >>> print(np.asarray(pooled[:, 0]).round(3))
      [0.  0.5 1.  0. ]
    """
    valid = valid_positions(mask, logits.shape[:-1])
    dtype = jnp.result_type(logits, inputs)
    carry_dtype = normalisation_dtype(dtype)
    # The scan reads one time-major batch axis: [..., T, F] -> [T, B, F] and back.
    logits, lead = merge_leading_axes(logits.astype(carry_dtype), 2)
    inputs, _ = merge_leading_axes(inputs.astype(carry_dtype), 2)
    valid, _ = merge_leading_axes(valid, 1)
    pooled = _streaming_pool(_time_major(logits), _time_major(inputs), _time_major(valid))
    return split_leading_axes(_time_major(pooled), lead).astype(dtype)


def causal_softmax_pool_quadratic(logits: jax.Array, inputs: jax.Array, *, mask: jax.Array | None = None) -> jax.Array:
    """`causal_softmax_pool` from the explicit [..., r, T, T] weights A_t[k, j], O(T^2) in time
    and memory: the reference for the streaming version (same padding convention).

    Args:
      logits: [..., T, r].
      inputs: [..., T, N].
      mask: optional [..., T], True at real positions.

    Returns:
      [..., T, N] m_t for every step t (zero at padded steps).

    Example:
      >>> import jax.numpy as jnp
      >>> import numpy as np
      >>> from jcaps.ops import causal_softmax_pool_quadratic
      >>> logits = jnp.zeros((1, 4, 1))  # [B, T, r]
      >>> inputs = jnp.arange(4.0).reshape(1, 4, 1)  # [B, T, N]: x_j = j
      >>> print(np.asarray(causal_softmax_pool_quadratic(logits, inputs)[0, :, 0]).round(3))
      [0.  0.5 1.  1.5]
    """
    steps, num_hops = logits.shape[-2:]
    valid = valid_positions(mask, logits.shape[:-1])
    causal = jnp.expand_dims(jnp.tril(jnp.ones((steps, steps), bool)), tuple(range(valid.ndim)))
    # [..., 1, t, j]: j <= t, j real, and t real (a padded step's row is all zero).
    weight_mask = causal & valid[..., None, None, :] & valid[..., None, :, None]
    logits = jnp.broadcast_to(jnp.swapaxes(logits, -1, -2)[..., None, :], logits.shape[:-2] + (num_hops, steps, steps))
    weights = masked_softmax(logits, mask=weight_mask, axis=-1)
    return jnp.einsum("...rtj,...jn->...tn", weights, zero_padding(inputs, valid)) / num_hops
