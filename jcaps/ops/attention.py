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
    keys: jax.Array,
    values: jax.Array,
    mask: jax.Array,
    scale: float = 1.0,
) -> tuple[jax.Array, jax.Array]:
  """Trainable multi-head attention with one learned query per head (iCapsNets Sec. II-C).

    alpha[i, n] = softmax_n(scale * <h_i, k[i, n]>)      (Eq. 3; padded n get 0)
    pooled[i]   = sum_n alpha[i, n] v[i, n]

  Each head i owns a query `h_i` and attends over its own keys and values (in iCapsNets
  `k[i, n] = Wk_i w_n`, `v[i, n] = Wv_i w_n`, computed by the caller). The paper uses no
  1/sqrt(d_q) factor, hence `scale = 1` by default.

  The hierarchical (word -> sentence) attention of iCapsNets_Long (Sec. II-E) is this op
  applied twice: once with leading axes [..., M] over the words of every sentence, then on
  the per-head sentence vectors with the same queries.

  Args:
    queries: [I, d_q], one query per head (primary capsule).
    keys: [..., I, N, d_q], head-major so the weights come out as [..., I, N].
    values: [..., I, N, d_v].
    mask: [..., N], True (or 1) at real positions.
    scale: multiplies the logits; pass `1 / sqrt(d_q)` for scaled dot-product attention.

  Returns:
    pooled: [..., I, d_v]; zero for a row with no real position.
    weights: [..., I, N] attention weights alpha; each row sums to 1 (0 if fully padded).
  """
  logits = scale * jnp.einsum("iq,...inq->...in", queries, keys)
  weights = masked_softmax(logits, jnp.asarray(mask)[..., None, :], axis=-1)
  pooled = jnp.einsum("...in,...ind->...id", weights, values)
  return pooled, weights
