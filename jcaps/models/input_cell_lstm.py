"""Input-cell attention LSTM (Ismail et al., NeurIPS 2019) and its LSTM baselines.

A multivariate series X [B, T, N] (mask [B, T], True at real steps) is classified from one
LSTM layer (hidden H = 5) and a linear readout. In the input-cell model the LSTM reads, at step
t, an attention summary m_t of the inputs x_1..x_t instead of x_t:

    S[j]   = W2 tanh(W1 x_j + b1) + b2       [B, T, r]: r hops, W1: d_a x N, W2: r x d_a, biases
                                             zero-init (`InputCellLSTM._attention_logits`).
    A_t    = softmax_{j <= t}(S), per hop    `jcaps.ops.pooling.causal_softmax_pool`: S does
    m_t    = (1/r) sum_k sum_{j <= t}        not depend on t nor on the LSTM state, so m is
               A_t[k, j] x_j                 computed for every t before the recurrence, in one
                                             O(T) streaming-softmax scan.
    h_t    = LSTM(m_t, h_{t-1}, c_{t-1})     `RecurrentLayer("lstm")` (`jcaps.ops.recurrent`,
                                             PyTorch's nn.LSTM cell; pads keep the state).
    scores = Dense(C)(h_last)                `jcaps.ops.recurrent.last_valid_state`, then the
                                             `readout` (PyTorch's nn.Linear initialisation).

The baselines (`variant`) feed x_t to the LSTM and differ in what the readout sees:

    lstm                 the last valid hidden state                `last_valid_state`
    lstm_maxpool         the maximum over the valid states          `masked_max_over_time`
    lstm_meanpool        the mean over the valid states             `masked_mean_over_time`
    lstm_self_attention  (1/r) sum_k sum_t A[k, t] h_t with         `structured_self_attention`
                         A = softmax_t(W2 tanh(W1 h_t)), r hops,
                         d_a (Lin et al. 2017, no biases)
    bilstm               [forward last valid state, backward state  `bidirectional_final_state`
                         at the first step]; the backward direction
                         starts at each sequence's own last valid step

Dropout (rate 0.1 [ref]) is applied to the LSTM inputs (m_t or x_t) and to the pooled hidden
vector fed to the readout.
"""

from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jcaps.choices import check_choice
from jcaps.models.choices import InputCellLSTMVariant, RNNImpl
from jcaps.models.dropout import Dropout
from jcaps.models.initializers import torch_linear_kernel, uniform
from jcaps.models.outputs import ModelOutput
from jcaps.models.recurrent_layers import RecurrentLayer
from jcaps.ops.attention import structured_self_attention
from jcaps.ops.pooling import causal_softmax_pool, masked_max_over_time, masked_mean_over_time
from jcaps.ops.recurrent import bidirectional_final_state, last_valid_state


class InputCellLSTM(nn.Module):
    """Input-cell attention LSTM or one of its baselines (module docstring); defaults [ref].

    Attributes:
        num_classes: C.
        variant: one of `InputCellLSTMVariant`.
        hidden_dim: LSTM hidden size H.
        num_hops: attention hops r (input_cell, lstm_self_attention).
        attention_dim: attention hidden size d_a (input_cell, lstm_self_attention).
        dropout_rate: dropout on the LSTM inputs and on the pooled hidden vector.
        pool: the input-cell pooling, (scores [B, T, r], series [B, T, N], *, mask [B, T] or
            None) -> m [B, T, N]: `causal_softmax_pool`, the streaming O(T) scan. The tests and
            the speed benchmark pass `jcaps.ops.causal_softmax_pool_quadratic`, the same
            function from the [B, r, T, T] weights of the equations as written.
        dtype: activation dtype; parameters are float32.
        rnn_impl: how the LSTM layer runs, "scan" or "cudnn" (`RecurrentLayer`).
    """

    num_classes: int
    variant: InputCellLSTMVariant = "input_cell"
    hidden_dim: int = 5
    num_hops: int = 20
    attention_dim: int = 50
    dropout_rate: float = 0.1
    pool: Callable[..., jax.Array] = causal_softmax_pool
    dtype: Any = jnp.float32
    rnn_impl: RNNImpl = "scan"

    def __post_init__(self):
        check_choice("variant", self.variant, InputCellLSTMVariant)
        super().__post_init__()

    @nn.compact
    def __call__(self, series: jax.Array, mask: jax.Array | None = None, *, train: bool = False) -> ModelOutput:
        """series [B, T, N] float, mask [B, T] bool (True at real steps; padded steps may hold
        any value) or None.

        Returns scores [B, C] logits; for input_cell also input_attention_logits [B, T, r]
        (S, from which every A_t follows), for lstm_self_attention hop_attention [B, r, T].
        """
        input_attention_logits = hop_attention = None
        series = series.astype(self.dtype)
        if mask is not None:
            # Zeros at the pads keep any value they hold (NaN included) out of every product
            # and gradient.
            series = jnp.where(mask[..., None], series, jnp.zeros_like(series))
        lstm_inputs = series
        if self.variant == "input_cell":
            input_attention_logits = self._attention_logits(series)
            lstm_inputs = self.pool(input_attention_logits, series, mask=mask)
        lstm_inputs = Dropout(self.dropout_rate, deterministic=not train)(lstm_inputs)

        directions = 2 if self.variant == "bilstm" else 1
        lstm = RecurrentLayer("lstm", self.hidden_dim, directions, self.dtype, self.rnn_impl, name="lstm")
        states = lstm(lstm_inputs, mask)  # [B, T, directions, H]
        forward = states[..., 0, :]
        if self.variant in ("input_cell", "lstm"):
            features = last_valid_state(forward, mask=mask)
        elif self.variant == "lstm_maxpool":
            features = masked_max_over_time(forward, mask=mask)
        elif self.variant == "lstm_meanpool":
            features = masked_mean_over_time(forward, mask=mask)
        elif self.variant == "bilstm":
            features = bidirectional_final_state(states, mask=mask)
        else:
            w1 = self.param("attention_w1", torch_linear_kernel, (self.hidden_dim, self.attention_dim))
            w2 = self.param("attention_w2", torch_linear_kernel, (self.attention_dim, self.num_hops))
            features, hop_attention = structured_self_attention(
                forward, w1.astype(self.dtype), w2.astype(self.dtype), mask=mask
            )
        features = Dropout(self.dropout_rate, deterministic=not train)(features)
        readout = nn.Dense(
            self.num_classes,
            kernel_init=torch_linear_kernel,
            bias_init=uniform(features.shape[-1] ** -0.5),
            dtype=self.dtype,
            name="readout",
        )
        return ModelOutput(
            scores=readout(features), input_attention_logits=input_attention_logits, hop_attention=hop_attention
        )

    def _attention_logits(self, series: jax.Array) -> jax.Array:
        """S = W2 tanh(W1 x_j + b1) + b2: series [B, T, N] -> [B, T, r]."""
        w1 = self.param("attention_w1", torch_linear_kernel, (series.shape[-1], self.attention_dim))
        b1 = self.param("attention_b1", nn.initializers.zeros, (self.attention_dim,))
        w2 = self.param("attention_w2", torch_linear_kernel, (self.attention_dim, self.num_hops))
        b2 = self.param("attention_b2", nn.initializers.zeros, (self.num_hops,))
        hidden = jnp.tanh(jnp.einsum("btn,na->bta", series, w1.astype(self.dtype)) + b1.astype(self.dtype)[None, None])
        return jnp.einsum("bta,ar->btr", hidden, w2.astype(self.dtype)) + b2.astype(self.dtype)[None, None]
