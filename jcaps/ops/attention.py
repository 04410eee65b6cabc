"""Attention ops: masked softmax and the attention kinds used by jcaps models.

Pure functions on arrays, usable under `jit`, `vmap` and `grad`. Every op takes a padding mask
(True for real positions): padded positions receive exactly zero weight, and a row with no
real position yields all-zero weights and a zero pooled vector rather than NaN.

Sections:
  * Masked softmax (shared by every attention kind).
  * Head-query attention (iCapsNets).

References:
  Wang, Hu, Ji. iCapsNets: Towards Interpretable Capsule Networks for Text Classification.
  2020 (Sec. II-C trainable multi-head attention; Sec. II-E its hierarchical form).
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
