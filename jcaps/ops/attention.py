"""Attention ops: masked softmax and the attention kinds used by jcaps models.

Pure functions on arrays, usable under `jit`, `vmap` and `grad`. Sequences are batch-major,
[..., T, F] with any leading batch axes (none for a single sequence). Every op takes a padding
mask [..., T] (True for real positions): padded positions receive exactly zero weight, and a
row with no real position yields all-zero weights and a zero pooled vector rather than NaN.

Sections:
  * Masked softmax (shared by every attention kind).
  * Head-query attention (iCapsNets).
  * Structured self-attention (Lin et al.).
  * Convolutional-network attention (ITAmoji): simplified, local and dot-product attention
    blocks of the dilated causal convolution network; which of them are causal.
  * Additive attention (Bahdanau; SGM).

References:
  Wang, Hu, Ji. iCapsNets: Towards Interpretable Capsule Networks for Text Classification.
  2020 (Sec. II-C trainable multi-head attention; Sec. II-E its hierarchical form).
  Lin, Feng, Nogueira dos Santos, Yu, Xiang, Zhou, Bengio. A Structured Self-attentive
  Sentence Embedding. ICLR 2017 (Sec. 2, the r-hop attention A = softmax(W_s2 tanh(W_s1 H^T))).
  Anderson. The dilated causal convolution network of the ITAmoji task, EVALITA 2018 (its
  attention variants: simplified, local, 1- and 8-head dot-product; docs/dilated-fcn.md#equations).
  Vaswani, Shazeer, Parmar, Uszkoreit, Jones, Gomez, Kaiser, Polosukhin. Attention Is All You
  Need. NeurIPS 2017 (Sec. 3.2, scaled dot-product and multi-head attention).
  Bahdanau, Cho, Bengio. Neural Machine Translation by Jointly Learning to Align and Translate.
  ICLR 2015 (Appendix A.1.2, the alignment model e = v^T tanh(W_a s + U_a h)).
  Yang, Sun, Li, Ma, Wu, Wang. SGM: Sequence Generation Model for Multi-label Classification.
  COLING 2018 (Sec. 2, the same attention over the BiLSTM encoder states).
"""

from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp

from jcaps.choices import check_choice
from jcaps.ops._arrays import (
    at_least_float32,
    valid_positions,
    zero_padding,
)
from jcaps.ops.convolution import causal_conv1d

# ---------------------------------------------------------------------------------------------
# Masked softmax (shared)
# ---------------------------------------------------------------------------------------------


def masked_softmax(logits: jax.Array, *, mask: jax.Array, axis: int = -1) -> jax.Array:
    """Softmax over `axis` restricted to the positions where `mask` is True.

        p_n = mask_n exp(x_n) / sum_m mask_m exp(x_m),   and p = 0 where no position is valid.

    Padded positions get exactly 0 (not a tiny number), so explanations read from the weights
    never point at padding, and their logits receive zero gradient even if they are non-finite.
    Narrow logits (bfloat16, float16) are normalised in float32 and the weights cast back, so
    mixed-precision models get float32-accurate weights in their own dtype.

    Args:
      logits: [..., N, ...] scores; `axis` is the normalised axis.
      mask: boolean (or 0/1), broadcastable to `logits` without adding axes (give it the same
        rank, e.g. `mask[..., None, :]`).
      axis: the axis to normalise over.

    Returns:
      [..., N, ...] weights, same shape and dtype as `logits`; each row sums to 1 when it has a
      valid position and to 0 when it has none.

    Example:
      >>> import jax.numpy as jnp
      >>> import numpy as np
      >>> from jcaps.ops import masked_softmax
      >>> logits = jnp.array([1.0, 2.0, 3.0])
      >>> print(np.asarray(masked_softmax(logits, mask=jnp.array([True, True, False]))).round(3))
      [0.269 0.731 0.   ]
    """
    dtype = logits.dtype
    logits = at_least_float32(logits)
    mask = jnp.broadcast_to(jnp.asarray(mask).astype(bool), logits.shape)
    # Inner `where`: padded logits never enter max/exp, so inf/NaN there cannot leak into the
    # value or (through a 0 * inf product) into the gradient.
    shift = jnp.max(jnp.where(mask, logits, -jnp.inf), axis=axis, keepdims=True)
    # An all-padded row has max -inf; any finite shift works there since all its terms are 0.
    shift = jax.lax.stop_gradient(jnp.where(jnp.isfinite(shift), shift, 0))
    unnormalised = jnp.where(mask, jnp.exp(jnp.where(mask, logits - shift, 0)), 0)
    total = jnp.sum(unnormalised, axis=axis, keepdims=True)
    return (unnormalised / jnp.where(total > 0, total, 1)).astype(dtype)


# ---------------------------------------------------------------------------------------------
# Head-query attention (iCapsNets)
# ---------------------------------------------------------------------------------------------


class HeadQueryAttentionParams(NamedTuple):
    """The parameters of `head_query_attention`, for I heads over inputs of d_in features.

    Attributes:
      queries: [I, d_q], one query h_i per head (primary capsule).
      key_kernel: [I, d_in, d_q], Wk_i^T of each head.
      value_kernel: [I, d_in, d_v], Wv_i^T of each head.
    """

    queries: jax.Array
    key_kernel: jax.Array
    value_kernel: jax.Array


def head_query_attention(
    inputs: jax.Array,
    params: HeadQueryAttentionParams,
    *,
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
      inputs: [..., N, d_in], read by every head; or [..., I, N, d_in], head i reads row i.
      params: the queries [I, d_q] and the key and value kernels of the I heads
        (`HeadQueryAttentionParams`).
      mask: [..., N], True (or 1) at real positions.
      scale: multiplies the logits; pass `1 / sqrt(d_q)` for scaled dot-product attention.

    Returns:
      pooled: [..., I, d_v]; zero for a row with no real position.
      weights: [..., I, N] attention weights alpha; each row sums to 1 (0 if fully padded).

    Example:
      Three heads read two sequences of N = 5 positions, the second one three long:

      >>> import jax.numpy as jnp
      >>> import numpy as np
      >>> from jcaps.ops import HeadQueryAttentionParams, head_query_attention
      >>> inputs = jnp.ones((2, 5, 4))  # [B, N, d_in]
      >>> mask = jnp.array([[True] * 5, [True, True, True, False, False]])
      >>> params = HeadQueryAttentionParams(jnp.ones((3, 6)), jnp.ones((3, 4, 6)), jnp.ones((3, 4, 8)))
      >>> pooled, weights = head_query_attention(inputs, params, mask=mask)
      >>> pooled.shape, weights.shape
      ((2, 3, 8), (2, 3, 5))
      >>> print(np.asarray(weights[1, 0]).round(3))
      [0.333 0.333 0.333 0.    0.   ]
    """
    per_head = inputs.ndim == jnp.ndim(mask) + 2
    folded_queries = scale * jnp.einsum("iq,idq->id", params.queries, params.key_kernel)
    logits_spec, pool_spec = (
        ("...ind,id->...in", "...in,...ind->...id") if per_head else ("...nd,id->...in", "...in,...nd->...id")
    )
    logits = jnp.einsum(logits_spec, inputs, folded_queries)
    weights = masked_softmax(logits, mask=jnp.asarray(mask)[..., None, :], axis=-1)
    pooled_inputs = jnp.einsum(pool_spec, weights, inputs)
    return jnp.einsum("...id,ide->...ie", pooled_inputs, params.value_kernel), weights


# ---------------------------------------------------------------------------------------------
# Structured self-attention (Lin et al.)
# ---------------------------------------------------------------------------------------------


def structured_self_attention(
    hidden: jax.Array,
    w1: jax.Array,
    w2: jax.Array,
    *,
    mask: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """r-hop self-attention over a sequence, pooled to one vector (Lin et al. 2017, Sec. 2).

        A      = softmax_t(W_s2 tanh(W_s1 h_t^T))      [r, T]; padded t get 0 (no biases, as the paper)
        pooled = (1/r) sum_k sum_t A[k, t] h_t         the rows of M = A H, averaged over hops

    Args:
      hidden: [..., T, H] states h_t.
      w1: [H, d_a], W_s1^T.
      w2: [d_a, r], W_s2^T.
      mask: optional [..., T], True at real positions.

    Returns:
      pooled: [..., H]; zero for a sequence with no real position.
      weights: [..., r, T] attention A; each row sums to 1 (0 if fully padded).

    Example:
      With zero weights every hop spreads evenly over the valid steps:

      >>> import jax.numpy as jnp
      >>> from jcaps.ops import structured_self_attention
      >>> hidden = jnp.arange(6.0).reshape(3, 2)  # one sequence: [T, H]
      >>> mask = jnp.array([True, True, False])
      >>> pooled, weights = structured_self_attention(hidden, jnp.zeros((2, 4)), jnp.zeros((4, 2)), mask=mask)
      >>> print(weights)  # [r, T]
      [[0.5 0.5 0. ]
       [0.5 0.5 0. ]]
      >>> print(pooled)
      [1. 2.]
    """
    valid = valid_positions(mask, hidden.shape[:-1])
    hidden = zero_padding(hidden, valid)
    logits = jnp.einsum("...ta,ar->...rt", jnp.tanh(jnp.einsum("...th,ha->...ta", hidden, w1)), w2)
    weights = masked_softmax(logits, mask=valid[..., None, :], axis=-1)
    return jnp.einsum("...rt,...th->...h", weights, hidden) / w2.shape[-1], weights


# ---------------------------------------------------------------------------------------------
# Convolutional-network attention (ITAmoji)
# ---------------------------------------------------------------------------------------------
#
# The attention blocks of the dilated causal convolution network (docs/dilated-fcn.md#equations),
# applied to its features x [..., L, C] after ReLU(sum of skips). Each returns y [..., L, C] and its weights;
# x, y and the weights are zero at padded positions, and a row with no valid position gives
# zeros (no NaN, in value or gradient).
#
#   simplified   y = softmax(Linear(x)) * x                 Linear block-diagonal on G groups
#   local        y = softmax(CausalConv_3(x)) * x           width-3 conv, block-diagonal likewise
#   dot          y = MultiHead(x, x, x) W_o                 scaled dot-product, 1 or 8 heads
#
# The softmax of simplified / local runs over the C/G channels of each group at one position
# (axis "channels") or, per channel, over the valid positions (axis "time").
#
# Causality (output t depends on no input after t): simplified and local with axis "channels"
# are causal (the local conv is padded on the left only). Non-causal: dot-product attention
# always (every position reads every valid key) and any variant with axis "time" (its softmax
# normalises over the future positions). None of them reads padding: padded keys and time
# positions get weight 0, so right-padding a sequence does not change its valid outputs.

# What the convolutional-network attention normalises over: channel groups or time steps.
ConvAttentionAxis = Literal["channels", "time"]


def _group_size(x: jax.Array, groups: int) -> int:
    """C/G, after checking that G divides the C channels of x [..., L, C]."""
    channels = x.shape[-1]
    if groups < 1 or channels % groups:
        raise ValueError(f"groups must be a positive divisor of the {channels} channels, got {groups}")
    return channels // groups


def _check_kernel_shape(kernel: jax.Array, expected: tuple, layout: str) -> None:
    if kernel.shape != expected:
        raise ValueError(f"kernel must have shape {layout} = {expected}, got {kernel.shape}")


def _softmax_gate(x, scores, valid, groups, axis):
    """weights = softmax(scores) within each channel group (axis "channels") or over the valid
    positions per channel (axis "time"); returns (weights * x, weights), [..., L, C] each."""
    check_choice("axis", axis, ConvAttentionAxis)
    grouped = scores.reshape(x.shape[:-1] + (groups, x.shape[-1] // groups))
    # The mask removes whole padded positions: with axis "channels" their rows become all-zero
    # weights, with axis "time" (axis -3 of [..., L, G, C/G]) they drop out of every channel's
    # normalisation.
    weights = masked_softmax(grouped, mask=valid[..., None, None], axis=-1 if axis == "channels" else -3)
    weights = weights.reshape(x.shape)
    return weights * x, weights


def _add_group_bias(scores: jax.Array, bias: jax.Array | None) -> jax.Array:
    """scores [..., L, C] + bias [G, C/G] (flattened group-major, as the channels are)."""
    if bias is None:
        return scores
    return scores + jnp.broadcast_to(bias.reshape(-1).astype(scores.dtype), scores.shape)


def simplified_attention(
    x: jax.Array,
    kernel: jax.Array,
    *,
    bias: jax.Array | None = None,
    mask: jax.Array | None = None,
    groups: int = 1,
    axis: ConvAttentionAxis = "channels",
) -> tuple[jax.Array, jax.Array]:
    """Simplified attention, y = softmax(Linear(x)) * x, on G channel groups.

        x_t = [x_t^1, ..., x_t^G]                      G groups of C/G channels
        s_t^g = W_g x_t^g + b_g                        a block-diagonal Linear
        a = softmax(s)    axis "channels": over the C/G channels of s_t^g, per position and group
                          axis "time":     over the valid positions t, per channel
        y_t = a_t * x_t

    Causal with axis "channels" (y_t reads x_t only); not causal with axis "time".

    Args:
      x: [..., L, C].
      kernel: [G, C/G, C/G], W_g^T of each group.
      bias: optional [G, C/G].
      mask: [..., L] bool, True at real positions (None: all real).
      groups: G (1 or 8 in the network).
      axis: "channels" or "time".

    Returns:
      y: [..., L, C]; zero at padded positions.
      weights: [..., L, C] attention a; zero at padded positions.

    Example:
      With a zero kernel the weights are uniform within each group of C/G channels:

      >>> import jax.numpy as jnp
      >>> from jcaps.ops import simplified_attention
      >>> x = jnp.ones((2, 5, 4))  # [B, L, C]
      >>> y, weights = simplified_attention(x, jnp.zeros((2, 2, 2)), groups=2)
      >>> y.shape
      (2, 5, 4)
      >>> print(weights[0, 0])
      [0.5 0.5 0.5 0.5]
    """
    group_size = _group_size(x, groups)
    _check_kernel_shape(kernel, (groups, group_size, group_size), "[G, C/G, C/G]")
    valid = valid_positions(mask, x.shape[:-1])
    x = zero_padding(x, valid)
    grouped = x.reshape(x.shape[:-1] + (groups, group_size))
    scores = jnp.einsum("...gi,gio->...go", grouped, kernel.astype(x.dtype)).reshape(x.shape)
    return _softmax_gate(x, _add_group_bias(scores, bias), valid, groups, axis)


def local_attention(
    x: jax.Array,
    kernel: jax.Array,
    *,
    bias: jax.Array | None = None,
    mask: jax.Array | None = None,
    groups: int = 1,
    axis: ConvAttentionAxis = "channels",
) -> tuple[jax.Array, jax.Array]:
    """Local attention, y = softmax(CausalConv(x)) * x, on G channel groups.

        s_t^g = b_g + sum_{k=0}^{W-1} K_{g,k} x_{t-(W-1-k)}^g       a causal, block-diagonal conv
        a = softmax(s) over channel groups or valid positions, y_t = a_t * x_t
                                                                    (as `simplified_attention`)

    The conv (width W = 3 in the network) is padded on the left only
    (`jcaps.ops.convolution.causal_conv1d`), so with axis "channels" y_t reads x_{t-W+1..t} and
    the network stays causal; with axis "time" it is not causal.

    Args:
      x: [..., L, C].
      kernel: [G, W, C/G, C/G], the conv kernel of each group (width first, then in, out).
      bias: optional [G, C/G].
      mask: [..., L] bool, True at real positions (None: all real).
      groups: G (1 or 8 in the network).
      axis: "channels" or "time".

    Returns:
      y: [..., L, C]; zero at padded positions.
      weights: [..., L, C] attention a; zero at padded positions.

    Example:
      Over time, each channel's weights spread evenly over the valid positions:

      >>> import jax.numpy as jnp
      >>> import numpy as np
      >>> from jcaps.ops import local_attention
      >>> x = jnp.ones((5, 4))  # one sequence: [L, C]
      >>> mask = jnp.array([True, True, True, False, False])
      >>> y, weights = local_attention(x, jnp.zeros((1, 3, 4, 4)), mask=mask, axis="time")
      >>> print(np.asarray(weights[:, 0]).round(3))
      [0.333 0.333 0.333 0.    0.   ]
    """
    channels = x.shape[-1]
    group_size = _group_size(x, groups)
    width = kernel.shape[1] if kernel.ndim == 4 else 3
    _check_kernel_shape(kernel, (groups, width, group_size, group_size), "[G, W, C/G, C/G]")
    valid = valid_positions(mask, x.shape[:-1])
    x = zero_padding(x, valid)
    # [G, W, C/G, C/G] -> [W, C/G, G C/G]: lax's grouped-conv layout, whose output channel
    # g C/G + j reads only input group g, matching the group-major channel order.
    conv_kernel = jnp.transpose(kernel, (1, 2, 0, 3)).reshape(width, group_size, channels)
    scores = causal_conv1d(x, conv_kernel.astype(x.dtype), groups=groups)
    return _softmax_gate(x, _add_group_bias(scores, bias), valid, groups, axis)


class DotProductAttentionParams(NamedTuple):
    """The kernels of `dot_product_attention` over inputs of C features (no biases).

    Attributes:
      query_kernel, key_kernel, value_kernel: [C, D], W_q^T, W_k^T and W_v^T; D divisible by
        the number of heads.
      output_kernel: [D, C_out], W_o^T.
    """

    query_kernel: jax.Array
    key_kernel: jax.Array
    value_kernel: jax.Array
    output_kernel: jax.Array


def dot_product_attention(
    x: jax.Array,
    params: DotProductAttentionParams,
    *,
    mask: jax.Array | None = None,
    num_heads: int = 1,
) -> tuple[jax.Array, jax.Array]:
    """Multi-head scaled dot-product self-attention over the valid positions (Vaswani et al.).

        q_t, k_t, v_t = W_q x_t, W_k x_t, W_v x_t         split into H heads of D/H
        A[h, t, s] = softmax_s(<q_t^h, k_s^h> / sqrt(D/H))    over the valid s only
        y_t = W_o [sum_s A[1, t, s] v_s^1, ..., sum_s A[H, t, s] v_s^H]

    Not causal: position t reads every valid position, before and after it. No biases.

    Args:
      x: [..., L, C].
      params: the query, key and value kernels [C, D], D divisible by `num_heads`, and the
        output kernel [D, C_out] (`DotProductAttentionParams`).
      mask: [..., L] bool, True at real positions (None: all real).
      num_heads: H (1 or 8 in the network).

    Returns:
      y: [..., L, C_out]; zero at padded positions.
      weights: [..., H, L, L] attention A (query t, key s); zero rows at padded queries, zero
        columns at padded keys.

    Example:
      >>> import jax.numpy as jnp
      >>> from jcaps.ops import DotProductAttentionParams, dot_product_attention
      >>> x = jnp.ones((2, 5, 4))  # [B, L, C]
      >>> mask = jnp.array([[True] * 5, [True, True, False, False, False]])
      >>> kernel = jnp.eye(4)
      >>> params = DotProductAttentionParams(kernel, kernel, kernel, output_kernel=jnp.ones((4, 3)))
      >>> y, weights = dot_product_attention(x, params, mask=mask, num_heads=2)
      >>> y.shape, weights.shape
      ((2, 5, 3), (2, 2, 5, 5))
      >>> print(weights[1, 0, 0])  # head 0, query 0 of the second sequence
      [0.5 0.5 0.  0.  0. ]
    """
    width = params.query_kernel.shape[-1]
    if num_heads < 1 or width % num_heads:
        raise ValueError(f"num_heads must be a positive divisor of the {width} projection features, got {num_heads}")
    valid = valid_positions(mask, x.shape[:-1])
    x = zero_padding(x, valid)

    def heads(kernel):
        return jnp.einsum("...c,cd->...d", x, kernel.astype(x.dtype)).reshape(x.shape[:-1] + (num_heads, -1))

    queries, keys, values = heads(params.query_kernel), heads(params.key_kernel), heads(params.value_kernel)
    logits = jnp.einsum("...thd,...shd->...hts", queries, keys) * (width // num_heads) ** -0.5
    weights = masked_softmax(logits, mask=valid[..., None, :, None] & valid[..., None, None, :], axis=-1)
    pooled = jnp.einsum("...hts,...shd->...thd", weights, values).reshape(x.shape[:-1] + (width,))
    y = jnp.einsum("...d,dc->...c", pooled, params.output_kernel.astype(x.dtype))
    return zero_padding(y, valid), weights


# ---------------------------------------------------------------------------------------------
# Additive attention (Bahdanau; SGM)
# ---------------------------------------------------------------------------------------------


class AdditiveAttentionParams(NamedTuple):
    """The query-side parameters of `additive_attention` (the key projection U_a is applied
    before it, once per sequence).

    Attributes:
      query_kernel: [Dq, A] W_a^T.
      score_vector: [A] v.
    """

    query_kernel: jax.Array
    score_vector: jax.Array


def additive_attention(
    query: jax.Array,
    keys: jax.Array,
    projected_keys: jax.Array,
    params: AdditiveAttentionParams,
    *,
    mask: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """Additive (Bahdanau) attention of one query per example over a sequence of keys.

        e_i = v^T tanh(W_a s + U_a h_i)       [..., L]; padded i get weight 0
        a   = softmax_i(e)
        c   = sum_i a_i h_i

    `projected_keys` = U_a h_i (+ any bias) does not depend on the query, so a decoder computes
    it once per sequence and this op, called at every step, only projects the query. Biases on
    W_a s and on v add nothing: the first is absorbed by the bias of U_a h_i, the second shifts
    every e_i equally and cancels in the softmax.

    Args:
      query: [..., Dq] the query s (a decoder state).
      keys: [..., L, Dk] the states h_i that are pooled (values are the keys).
      projected_keys: [..., L, A] U_a h_i.
      params: W_a^T [Dq, A] and v [A] (`AdditiveAttentionParams`).
      mask: [..., L], True (or 1) at real positions.

    Returns:
      context: [..., Dk] c; zero for a row with no real position.
      weights: [..., L] a; sums to 1 (0 if fully padded).

    Example:
      Equal scores spread the weight evenly over the valid keys:

      >>> import jax.numpy as jnp
      >>> from jcaps.ops import AdditiveAttentionParams, additive_attention
      >>> keys = jnp.arange(6.0).reshape(3, 2)  # one sequence: [L, Dk]
      >>> projected_keys = jnp.zeros((3, 5))
      >>> params = AdditiveAttentionParams(query_kernel=jnp.zeros((4, 5)), score_vector=jnp.ones(5))
      >>> mask = jnp.array([True, True, False])
      >>> context, weights = additive_attention(jnp.ones(4), keys, projected_keys, params, mask=mask)
      >>> print(weights)
      [0.5 0.5 0. ]
      >>> print(context)
      [1. 2.]
    """
    valid = jnp.asarray(mask).astype(bool)
    hidden = jnp.tanh(projected_keys + (query @ params.query_kernel)[..., None, :])
    weights = masked_softmax(jnp.einsum("...la,a->...l", hidden, params.score_vector), mask=valid)
    # Zeroed pads: a non-finite value there would turn its 0 weight into NaN in the sum.
    return jnp.einsum("...l,...ld->...d", weights, zero_padding(keys, valid)), weights
