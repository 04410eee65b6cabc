"""Attention ops: masked softmax and the attention kinds used by jcaps models.

Pure functions on arrays, usable under `jit`, `vmap` and `grad`. Every op takes a padding mask
(True for real positions): padded positions receive exactly zero weight, and a row with no
real position yields all-zero weights and a zero pooled vector rather than NaN.

Sections:
  * Masked softmax (shared by every attention kind).
  * Head-query attention (iCapsNets).
  * Causal softmax pooling (input-cell attention).
  * Structured self-attention (Lin et al.).

References:
  Wang, Hu, Ji. iCapsNets: Towards Interpretable Capsule Networks for Text Classification.
  2020 (Sec. II-C trainable multi-head attention; Sec. II-E its hierarchical form).
  Ismail, Gunady, Pessoa, Corrada Bravo, Feizi. Input-Cell Attention Reduces Vanishing
  Saliency of Recurrent Neural Networks. NeurIPS 2019 (Sec. 4, input-cell attention).
  Lin, Feng, Nogueira dos Santos, Yu, Xiang, Zhou, Bengio. A Structured Self-attentive
  Sentence Embedding. ICLR 2017 (Sec. 2, the r-hop attention A = softmax(W_s2 tanh(W_s1 H^T))).
"""

import jax
import jax.numpy as jnp

# ---------------------------------------------------------------------------------------------
# Masked softmax (shared)
# ---------------------------------------------------------------------------------------------


def masked_softmax(logits: jax.Array, mask: jax.Array, axis: int = -1) -> jax.Array:
    """Softmax over `axis` restricted to the positions where `mask` is True.

      p_n = mask_n exp(x_n) / sum_m mask_m exp(x_m),   and p = 0 where no position is valid.

    Padded positions get exactly 0 (not a tiny number), so explanations read from the weights
    never point at padding, and their logits receive zero gradient even if they are non-finite.

    Args:
      logits: [..., N, ...] scores; `axis` is the normalised axis.
      mask: boolean (or 0/1), broadcastable to `logits` without adding axes (give it the same
        rank, e.g. `mask[..., None, :]`).
      axis: the axis to normalise over.

    Returns:
      [..., N, ...] weights, same shape and dtype as `logits`; each row sums to 1 when it has a
      valid position and to 0 when it has none.
    """
    mask = jnp.broadcast_to(jnp.asarray(mask).astype(bool), logits.shape)
    # Inner `where`: padded logits never enter max/exp, so inf/NaN there cannot leak into the
    # value or (through a 0 * inf product) into the gradient.
    shift = jnp.max(jnp.where(mask, logits, -jnp.inf), axis=axis, keepdims=True)
    # An all-padded row has max -inf; any finite shift works there since all its terms are 0.
    shift = jax.lax.stop_gradient(jnp.where(jnp.isfinite(shift), shift, 0))
    unnormalised = jnp.where(mask, jnp.exp(jnp.where(mask, logits - shift, 0)), 0)
    total = jnp.sum(unnormalised, axis=axis, keepdims=True)
    return unnormalised / jnp.where(total > 0, total, 1)


# ---------------------------------------------------------------------------------------------
# Head-query attention (iCapsNets)
# ---------------------------------------------------------------------------------------------


def head_query_attention(
    queries: jax.Array,
    inputs: jax.Array,
    key_kernel: jax.Array,
    value_kernel: jax.Array,
    mask: jax.Array,
    scale: float = 1.0,
) -> tuple[jax.Array, jax.Array]:
    """Trainable multi-head attention with one learned query per head (iCapsNets Sec. II-C).

      k[i, n] = Wk_i x_n,   v[i, n] = Wv_i x_n
      alpha[i, n] = softmax_n(scale * <h_i, k[i, n]>)      (Eq. 3; padded n get 0)
      pooled[i]   = sum_n alpha[i, n] v[i, n]

    computed, exactly, as

      alpha[i, n] = softmax_n(scale * <Wk_i^T h_i, x_n>)   pooled[i] = Wv_i (sum_n alpha[i, n] x_n)

    The keys and values of every head at every position (I * N * (d_q + d_v) numbers per
    example) are never formed: folding the query into the key map and pooling before the
    value map turns the two largest matmuls of the model into [N, d_in] x [d_in, I] and
    [I, d_in] x [d_in, d_v]. The paper uses no 1/sqrt(d_q) factor, hence `scale = 1`.

    The hierarchical (word -> sentence) attention of iCapsNets_Long (Sec. II-E) is this op
    applied twice: over the words of every sentence, then over the per-head sentence vectors
    (inputs [..., I, M, d_in]: head i reads its own row) with the same queries.

    Args:
      queries: [I, d_q], one query h_i per head (primary capsule).
      inputs: [..., N, d_in], read by every head; or [..., I, N, d_in], head i reads row i.
      key_kernel: [I, d_in, d_q], Wk_i^T of each head.
      value_kernel: [I, d_in, d_v], Wv_i^T of each head.
      mask: [..., N], True (or 1) at real positions.
      scale: multiplies the logits; pass `1 / sqrt(d_q)` for scaled dot-product attention.

    Returns:
      pooled: [..., I, d_v]; zero for a row with no real position.
      weights: [..., I, N] attention weights alpha; each row sums to 1 (0 if fully padded).
    """
    per_head = inputs.ndim == jnp.ndim(mask) + 2
    folded_queries = scale * jnp.einsum("iq,idq->id", queries, key_kernel)
    logits_spec, pool_spec = (
        ("...ind,id->...in", "...in,...ind->...id") if per_head else ("...nd,id->...in", "...in,...nd->...id")
    )
    logits = jnp.einsum(logits_spec, inputs, folded_queries)
    weights = masked_softmax(logits, jnp.asarray(mask)[..., None, :], axis=-1)
    pooled_inputs = jnp.einsum(pool_spec, weights, inputs)
    return jnp.einsum("...id,ide->...ie", pooled_inputs, value_kernel), weights


# ---------------------------------------------------------------------------------------------
# Causal softmax pooling (input-cell attention)
# ---------------------------------------------------------------------------------------------


def _time_major(x: jax.Array) -> jax.Array:
    """[B, T, ...] <-> [T, B, ...]."""
    return jnp.swapaxes(x, 0, 1)


def _pool_step(carry, step_inputs):
    """One step of the streaming softmax: (M, Z, P) [B, r], [B, r], [B, r, N] after one more
    position (scores [B, r], input [B, N], valid [B]); a padded position leaves them as they
    are. M is -inf until the first valid position."""
    running_max, total, weighted = carry
    scores, x, valid = step_inputs
    scores = jnp.where(valid[:, None], scores, -jnp.inf)
    new_max = jnp.maximum(running_max, scores)
    # While the max is still -inf every term is 0, and any finite shift keeps exp from NaN.
    shift = jnp.where(jnp.isfinite(new_max), new_max, 0)
    decay, weight = jnp.exp(running_max - shift), jnp.exp(scores - shift)
    total = decay * total + weight
    weighted = decay[..., None] * weighted + weight[..., None] * x[:, None, :]
    return new_max, total, weighted


def _initial_pool_carry(scores, inputs):
    """(M, Z, P) before any position: -inf, 0, 0."""
    return (
        jnp.full(scores.shape[1:], -jnp.inf, scores.dtype),
        jnp.zeros(scores.shape[1:], scores.dtype),
        jnp.zeros(scores.shape[1:] + inputs.shape[-1:], inputs.dtype),
    )


def _positive_or_one(total):
    return jnp.where(total > 0, total, 1)


@jax.custom_vjp
def _causal_pool(scores, inputs, valid):
    """Time-major `causal_softmax_pool`: scores [T, B, r], inputs [T, B, N], valid [T, B] ->
    [T, B, N]."""
    return _causal_pool_forward(scores, inputs, valid)[0]


def _causal_pool_forward(scores, inputs, valid):
    # Zeroed padded inputs: exp(-inf) = 0 times a NaN input would still be NaN.
    inputs = jnp.where(valid[..., None], inputs, 0)

    def step(carry, step_inputs):
        carry = _pool_step(carry, step_inputs)
        running_max, total, weighted = carry
        pooled = jnp.mean(weighted / _positive_or_one(total)[..., None], axis=-2)
        pooled = jnp.where(step_inputs[2][:, None], pooled, 0)
        return carry, (pooled, running_max, total)

    pooled, running_max, total = jax.lax.scan(step, _initial_pool_carry(scores, inputs), (scores, inputs, valid))[1]
    return pooled, (scores, inputs, valid, running_max, total)


def _causal_pool_backward(residuals, pooled_cotangent):
    """With e_j = exp(s_j - M_j), Z_t, P_t, M_t the carries after step t (per hop) and
    g_t = v_t dL/dm_t / r (v_t: step t valid), the gradients are

      dL/dx_j = v_j sum_k e_jk R_jk,   dL/ds_jk = v_j e_jk (x_j . R_jk - Q_jk),   where
      R_j = sum_{t >= j} exp(M_j - M_t) g_t / Z_t           [B, r, N]
      Q_j = sum_{t >= j} exp(M_j - M_t) g_t . P_t / Z_t^2   [B, r]

    R and Q follow R_j = g_j / Z_j + exp(M_j - M_{j+1}) R_{j+1} (likewise Q): one reverse
    scan, with factors exp(M_j - M_{j+1}) <= 1. g_t . P_t needs the carries P_t again; a
    forward scan recomputes them and emits only that [B, r] product.
    """
    scores, inputs, valid, running_max, total = residuals
    num_hops = scores.shape[-1]
    g = jnp.where(valid[..., None], pooled_cotangent, 0) / num_hops
    # v_t / Z_t; Z_t >= 1 at a valid step (the maximal term is exp(0)).
    inverse_total = jnp.where(valid[..., None], 1 / _positive_or_one(total), 0)

    def recompute_step(carry, step_inputs):
        *pool_inputs, step_g, step_inverse_total = step_inputs
        carry = _pool_step(carry, pool_inputs)
        projected = jnp.einsum("bn,brn->br", step_g, carry[2])
        return carry, projected * jnp.square(step_inverse_total)

    recompute_inputs = (scores, inputs, valid, g, inverse_total)
    projected = jax.lax.scan(recompute_step, _initial_pool_carry(scores, inputs), recompute_inputs)[1]

    shift = jnp.where(jnp.isfinite(running_max), running_max, 0)
    # exp(M_j - M_{j+1}); 0 while no position is valid yet (M_j = -inf). The last step's
    # factor multiplies the zero initial carry.
    decay = jnp.exp(running_max - jnp.concatenate([shift[1:], shift[-1:]], axis=0))
    weights = jnp.exp(jnp.where(valid[..., None], scores, -jnp.inf) - shift)

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

    _, zero_projected, zero_pooled = _initial_pool_carry(scores, inputs)
    initial = (zero_pooled, zero_projected)
    reverse_inputs = (decay, g, inverse_total, projected, weights, inputs, valid)
    input_cotangent, score_cotangent = jax.lax.scan(reverse_step, initial, reverse_inputs, reverse=True)[1]
    return score_cotangent, input_cotangent, None


_causal_pool.defvjp(_causal_pool_forward, _causal_pool_backward)


def causal_softmax_pool(scores: jax.Array, inputs: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """The input-cell attention of every prefix: a causal softmax pooling of the inputs.

      A_t[k, j] = softmax_{j <= t}(s[j, k])                 (per hop k; padded j get 0)
      m_t       = (1/r) sum_k sum_{j <= t} A_t[k, j] x_j

    for all t in one pass over time, O(T) in time and memory: a scan carries, per hop, the
    running maximum M of the scores, Z = sum_j exp(s_j - M) and P = sum_j exp(s_j - M) x_j
    ([B, r, N]); when M grows, Z and P are rescaled by exp(M_old - M_new) <= 1, so no
    exponent is positive and scores of any magnitude are safe. m_t = mean_k P_k / Z_k.

    A hand-written VJP keeps the gradient O(T) as well: autodiff of the scan would store the
    [B, r, N] carry of every step. The backward pass instead recomputes the carries in a
    second forward scan (emitting only [B, r] per step) and runs one reverse scan. Being a
    custom VJP, it supports reverse-mode differentiation only (no `jax.jvp`, `jax.jacfwd`).

    Padding: padded positions never enter (their scores and inputs may hold anything, even
    inf or NaN, and get zero gradient), and m_t = 0 at a padded step t, as the recurrent ops
    output zeros there. A valid step pools the valid positions j <= t, wherever the pads are.
    `causal_softmax_pool_quadratic` is the same function computed from the [T, T] weights.

    Args:
      scores: [B, T, r] attention scores s (one per hop and position), independent of t.
      inputs: [B, T, N] the vectors x_j that are pooled.
      mask: optional [B, T], True at real positions.

    Returns:
      [B, T, N] m_t for every step t (zero at padded steps).
    """
    valid = jnp.ones(scores.shape[:2], bool) if mask is None else jnp.asarray(mask).astype(bool)
    dtype = jnp.result_type(scores, inputs)
    pooled = _causal_pool(_time_major(scores.astype(dtype)), _time_major(inputs.astype(dtype)), _time_major(valid))
    return _time_major(pooled)


def causal_softmax_pool_quadratic(scores: jax.Array, inputs: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """`causal_softmax_pool` from the explicit [B, r, T, T] weights A_t[k, j], O(T^2) in time
    and memory: the reference for the streaming version (same padding convention).

    Args:
      scores: [B, T, r].
      inputs: [B, T, N].
      mask: optional [B, T], True at real positions.

    Returns:
      [B, T, N] m_t for every step t (zero at padded steps).
    """
    batch, steps, num_hops = scores.shape
    valid = jnp.ones((batch, steps), bool) if mask is None else jnp.asarray(mask).astype(bool)
    causal = jnp.tril(jnp.ones((steps, steps), bool))
    # [B, 1, t, j]: j <= t, j real, and t real (a padded step's row is all zero).
    weight_mask = causal[None, None] & valid[:, None, None, :] & valid[:, None, :, None]
    logits = jnp.broadcast_to(jnp.swapaxes(scores, 1, 2)[:, :, None, :], (batch, num_hops, steps, steps))
    weights = masked_softmax(logits, weight_mask, axis=-1)
    inputs = jnp.where(valid[..., None], inputs, 0)
    return jnp.einsum("brtj,bjn->btn", weights, inputs) / num_hops


# ---------------------------------------------------------------------------------------------
# Structured self-attention (Lin et al.)
# ---------------------------------------------------------------------------------------------


def structured_self_attention(
    hidden: jax.Array,
    w1: jax.Array,
    w2: jax.Array,
    mask: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """r-hop self-attention over a sequence, pooled to one vector (Lin et al. 2017, Sec. 2).

      A      = softmax_t(W_s2 tanh(W_s1 h_t^T))      [r, T]; padded t get 0 (no biases, as the paper)
      pooled = (1/r) sum_k sum_t A[k, t] h_t         the rows of M = A H, averaged over hops

    Args:
      hidden: [B, T, H] states h_t.
      w1: [H, d_a], W_s1^T.
      w2: [d_a, r], W_s2^T.
      mask: optional [B, T], True at real positions.

    Returns:
      pooled: [B, H]; zero for a sequence with no real position.
      weights: [B, r, T] attention A; each row sums to 1 (0 if fully padded).
    """
    valid = jnp.ones(hidden.shape[:2], bool) if mask is None else jnp.asarray(mask).astype(bool)
    hidden = jnp.where(valid[..., None], hidden, 0)
    logits = jnp.einsum("bta,ar->brt", jnp.tanh(jnp.einsum("bth,ha->bta", hidden, w1)), w2)
    weights = masked_softmax(logits, valid[:, None, :], axis=-1)
    return jnp.einsum("brt,bth->bh", weights, hidden) / w2.shape[-1], weights
