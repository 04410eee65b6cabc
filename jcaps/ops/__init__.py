"""The array ops of the jcaps models: pure JAX functions, usable under `jit`, `vmap` and `grad`.

Sequences are batch-major, [..., T, F] with any leading batch axes (none for a single
sequence), with a padding mask [..., T] that is True at real positions; capsules are
[..., num_caps, dim]. Every op runs on one example and under `vmap` over a batch. This
package imports JAX only (no Flax, no Optax, nothing else of jcaps but `jcaps.choices`, which
imports nothing).

Calling convention: an op takes its arrays first (the data, then its parameters), and every
option after them keyword-only: masks, optional biases and keys, axes, sizes, constants.
Head-query, dot-product and additive attention take their parameters as one NamedTuple,
`<Op>Params`, that documents their shapes
(`dot_product_attention(x, DotProductAttentionParams(...), mask=m)`).

Modules (each docstring gives the equations and the papers):
  attention       masked softmax; head-query, structured self-, convolutional-network and
                  additive attention
  capsules        squash, prediction vectors, dynamic and k-means routing, routing contributions
  convolution     causal convolutions and the dilated residual stack
  decoding        greedy and beam-search decoding of label sequences
  embeddings      compositional word embeddings (codeword-weighted and compositional coding)
  losses          per-example classification losses
  pooling         masked means and maxima over time, input-cell attention's causal pooling
  recurrent       GRU and LSTM scans, the states they end in
  regularisation  dropout, its mask from 8 or 16 random bits per element

Example:
    >>> import jax.numpy as jnp
    >>> from jcaps import ops
    >>> print(ops.masked_softmax(jnp.zeros(4), mask=jnp.array([True, True, False, False])))
    [0.5 0.5 0.  0. ]
"""

from jcaps.ops.attention import (
    AdditiveAttentionParams,
    ConvAttentionAxis,
    DotProductAttentionParams,
    HeadQueryAttentionParams,
    additive_attention,
    dot_product_attention,
    head_query_attention,
    local_attention,
    masked_softmax,
    simplified_attention,
    structured_self_attention,
)
from jcaps.ops.capsules import (
    capsule_length,
    dynamic_routing,
    kmeans_routing,
    routing_contributions,
    shared_prediction_vectors,
    squash,
    unshared_prediction_vectors,
)
from jcaps.ops.convolution import (
    LAYER_KEYS,
    Activation,
    causal_conv1d,
    dilated_residual_stack,
    pointwise_conv,
    receptive_field,
    residual_layer,
)
from jcaps.ops.decoding import (
    DecodeResult,
    beam_search,
    emitted_to_multi_hot,
    greedy_decode,
    label_mask_logits,
    mark_emitted,
)
from jcaps.ops.embeddings import cc_embedding, cwc_embedding, num_codewords
from jcaps.ops.losses import (
    cross_entropy,
    focal_loss,
    margin_loss,
    sequence_cross_entropy,
    sigmoid_binary_cross_entropy,
)
from jcaps.ops.pooling import (
    causal_softmax_pool,
    causal_softmax_pool_quadratic,
    masked_max_over_time,
    masked_mean_over_time,
)
from jcaps.ops.recurrent import (
    bidirectional_final_state,
    bidirectional_gru,
    bidirectional_lstm,
    gru_scan,
    last_valid_state,
    lstm_cell,
    lstm_scan,
)
from jcaps.ops.regularisation import dropout

__all__ = [  # noqa: RUF022 (grouped by module, sorted within each group)
    # attention
    "AdditiveAttentionParams",
    "ConvAttentionAxis",
    "DotProductAttentionParams",
    "HeadQueryAttentionParams",
    "additive_attention",
    "causal_softmax_pool",
    "causal_softmax_pool_quadratic",
    "dot_product_attention",
    "head_query_attention",
    "local_attention",
    "masked_softmax",
    "simplified_attention",
    "structured_self_attention",
    # capsules
    "capsule_length",
    "dynamic_routing",
    "kmeans_routing",
    "routing_contributions",
    "shared_prediction_vectors",
    "squash",
    "unshared_prediction_vectors",
    # convolution
    "Activation",
    "LAYER_KEYS",
    "causal_conv1d",
    "dilated_residual_stack",
    "pointwise_conv",
    "receptive_field",
    "residual_layer",
    # decoding
    "DecodeResult",
    "beam_search",
    "emitted_to_multi_hot",
    "greedy_decode",
    "label_mask_logits",
    "mark_emitted",
    # embeddings
    "cc_embedding",
    "cwc_embedding",
    "num_codewords",
    # losses
    "cross_entropy",
    "focal_loss",
    "margin_loss",
    "sequence_cross_entropy",
    "sigmoid_binary_cross_entropy",
    # recurrent
    "bidirectional_final_state",
    "bidirectional_gru",
    "bidirectional_lstm",
    "gru_scan",
    "last_valid_state",
    "lstm_cell",
    "lstm_scan",
    "masked_max_over_time",
    "masked_mean_over_time",
    # regularisation
    "dropout",
]
