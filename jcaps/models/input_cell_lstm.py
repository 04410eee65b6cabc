"""Input-cell attention LSTM (Ismail et al., NeurIPS 2019) and its LSTM baselines.

A multivariate series X [B, T, N] (mask [B, T], True at real steps) is classified from one
LSTM layer (hidden H = 5) and a linear readout. In the input-cell model the LSTM reads, at step
t, an attention summary m_t of the inputs x_1..x_t instead of x_t:

    S[j]   = W2 tanh(W1 x_j + b1) + b2       [B, T, r]: r hops, W1: d_a x N, W2: r x d_a, biases
                                             zero-init (`InputCellLSTM._attention_scores`).
    A_t    = softmax_{j <= t}(S), per hop    `jcaps.ops.attention.causal_softmax_pool`: S does
    m_t    = (1/r) sum_k sum_{j <= t}        not depend on t nor on the LSTM state, so m is
               A_t[k, j] x_j                 computed for every t before the recurrence, in one
                                             O(T) streaming-softmax scan.
    h_t    = LSTM(m_t, h_{t-1}, c_{t-1})     `LSTM` (`jcaps.ops.recurrent.lstm_scan`, PyTorch's
                                             nn.LSTM cell; pads keep the state).
    scores = Dense(C)(h_last)                `jcaps.ops.recurrent.last_valid_state`, then the
                                             `readout` (PyTorch's nn.Linear initialisation).

The baselines (`variant`) feed x_t to the LSTM and differ in what the readout sees:

    lstm                 the last valid hidden state                `last_valid_state`
    lstm_maxpool         the maximum over the valid states          `masked_max_over_time`
    lstm_meanpool        the mean over the valid states             `masked_mean_over_time`
    lstm_self_attention  (1/r) sum_k sum_t A[k, t] h_t with         `structured_self_attention`
                         A = softmax_t(W2 tanh(W1 h_t)), r hops,
                         d_a (Lin et al. 2017, no biases)
    bilstm               [forward last valid state, backward state  `LSTM` with two directions
                         at the first step]; the backward direction
                         starts at each sequence's own last valid step

Dropout (rate 0.1 [ref]) is applied to the LSTM inputs (m_t or x_t) and to the pooled hidden
vector fed to the readout.
"""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jcaps.models.choices import INPUT_CELL_LSTM_VARIANTS
from jcaps.models.initializers import torch_linear_kernel, uniform
from jcaps.ops.attention import causal_softmax_pool, causal_softmax_pool_quadratic, structured_self_attention
from jcaps.ops.recurrent import last_valid_state, lstm_scan, masked_max_over_time, masked_mean_over_time

CAUSAL_POOLS = {"linear": causal_softmax_pool, "quadratic": causal_softmax_pool_quadratic}


class LSTM(nn.Module):
    """One LSTM layer, one or two directions, with PyTorch's parameters and initialisation.

    Parameters carry the direction on a leading axis (forward[, backward]) and the gates in the
    order (i, f, g, o): input_kernel [K, D, 4H], input_bias [K, 4H], hidden_kernel [K, H, 4H],
    hidden_bias [K, 4H], all U(-1/sqrt(H), 1/sqrt(H)).
    """

    hidden_dim: int
    num_directions: int = 1
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array | None) -> jax.Array:
        """x [T, B, D] time-major, mask [T, B] bool or None -> [K, T, B, H] states of each
        direction, in input time order (zero at padded steps)."""
        init = uniform(self.hidden_dim**-0.5)
        gates, directions = 4 * self.hidden_dim, self.num_directions
        input_kernel = self.param("input_kernel", init, (directions, x.shape[-1], gates)).astype(self.dtype)
        input_bias = self.param("input_bias", init, (directions, gates)).astype(self.dtype)
        hidden_kernel = self.param("hidden_kernel", init, (directions, self.hidden_dim, gates)).astype(self.dtype)
        hidden_bias = self.param("hidden_bias", init, (directions, gates)).astype(self.dtype)
        # The input projections of every step and direction are one matmul, outside the scans.
        projected = jnp.einsum("tbd,kdg->ktbg", x.astype(self.dtype), input_kernel) + input_bias[:, None, None, :]
        valid = jnp.ones(x.shape[:2], bool) if mask is None else mask

        def time_reversed_backward(per_direction):
            """Direction k = 1 (backward) flipped in time; stacked to [K, T, ...]."""
            return jnp.stack([jnp.flip(a, axis=0) if direction else a for direction, a in enumerate(per_direction)])

        # The backward direction reads the reversed sequence. With the mask reversed too, it
        # crosses the trailing pads with its state held at zero, so it starts at each
        # sequence's own last valid step.
        states = jax.vmap(lstm_scan)(
            time_reversed_backward(projected),
            hidden_kernel,
            hidden_bias,
            time_reversed_backward([valid] * directions),
        )
        return time_reversed_backward(states)


class InputCellLSTM(nn.Module):
    """Input-cell attention LSTM or one of its baselines (module docstring); defaults [ref].

    Attributes:
        num_classes: C.
        variant: one of `INPUT_CELL_LSTM_VARIANTS`.
        hidden_dim: LSTM hidden size H.
        num_hops: attention hops r (input_cell, lstm_self_attention).
        attention_dim: attention hidden size d_a (input_cell, lstm_self_attention).
        dropout_rate: dropout on the LSTM inputs and on the pooled hidden vector.
        causal_pool: "linear" (the streaming O(T) scan) or "quadratic" (the [B, r, T, T] masked
            softmax of the equations as written; same values, for benchmarks and checks).
        dtype: activation dtype; parameters are float32.
    """

    num_classes: int
    variant: str = "input_cell"
    hidden_dim: int = 5
    num_hops: int = 20
    attention_dim: int = 50
    dropout_rate: float = 0.1
    causal_pool: str = "linear"
    dtype: Any = jnp.float32

    def __post_init__(self):
        if self.variant not in INPUT_CELL_LSTM_VARIANTS:
            raise ValueError(f"variant must be one of {INPUT_CELL_LSTM_VARIANTS}, got {self.variant!r}")
        if self.causal_pool not in CAUSAL_POOLS:
            raise ValueError(f"causal_pool must be one of {tuple(CAUSAL_POOLS)}, got {self.causal_pool!r}")
        super().__post_init__()

    @nn.compact
    def __call__(self, series: jax.Array, mask: jax.Array | None = None, *, train: bool = False) -> dict:
        """series [B, T, N] float, mask [B, T] bool (True at real steps; padded steps may hold
        any value) or None.

        Returns a dict: scores [B, C] logits; for input_cell also attention_scores [B, T, r]
        (S, from which every A_t follows), for lstm_self_attention attention [B, r, T].
        """
        outputs = {}
        series = series.astype(self.dtype)
        if mask is not None:
            # Zeros at the pads keep any value they hold (NaN included) out of every product
            # and gradient.
            series = jnp.where(mask[..., None], series, jnp.zeros_like(series))
        lstm_inputs = series
        if self.variant == "input_cell":
            scores = self._attention_scores(series)
            lstm_inputs = CAUSAL_POOLS[self.causal_pool](scores, series, mask)
            outputs["attention_scores"] = scores
        lstm_inputs = nn.Dropout(self.dropout_rate, deterministic=not train)(lstm_inputs)

        time_mask = None if mask is None else mask.T
        directions = 2 if self.variant == "bilstm" else 1
        states = LSTM(self.hidden_dim, directions, self.dtype, name="lstm")(jnp.swapaxes(lstm_inputs, 0, 1), time_mask)
        forward = states[0]
        if self.variant in ("input_cell", "lstm"):
            features = last_valid_state(forward, time_mask)
        elif self.variant == "lstm_maxpool":
            features = masked_max_over_time(forward, time_mask)
        elif self.variant == "lstm_meanpool":
            features = masked_mean_over_time(forward, time_mask)
        elif self.variant == "bilstm":
            # The backward state at the first valid step is the last valid one in reversed time.
            reversed_mask = None if time_mask is None else jnp.flip(time_mask, axis=0)
            first_backward = last_valid_state(jnp.flip(states[1], axis=0), reversed_mask)
            features = jnp.concatenate([last_valid_state(forward, time_mask), first_backward], axis=-1)
        else:
            w1 = self.param("attention_w1", torch_linear_kernel, (self.hidden_dim, self.attention_dim))
            w2 = self.param("attention_w2", torch_linear_kernel, (self.attention_dim, self.num_hops))
            features, outputs["attention"] = structured_self_attention(
                jnp.swapaxes(forward, 0, 1), w1.astype(self.dtype), w2.astype(self.dtype), mask
            )
        features = nn.Dropout(self.dropout_rate, deterministic=not train)(features)
        readout = nn.Dense(
            self.num_classes,
            kernel_init=torch_linear_kernel,
            bias_init=uniform(features.shape[-1] ** -0.5),
            dtype=self.dtype,
            name="readout",
        )
        return {"scores": readout(features), **outputs}

    def _attention_scores(self, series: jax.Array) -> jax.Array:
        """S = W2 tanh(W1 x_j + b1) + b2: series [B, T, N] -> [B, T, r]."""
        w1 = self.param("attention_w1", torch_linear_kernel, (series.shape[-1], self.attention_dim))
        b1 = self.param("attention_b1", nn.initializers.zeros, (self.attention_dim,))
        w2 = self.param("attention_w2", torch_linear_kernel, (self.attention_dim, self.num_hops))
        b2 = self.param("attention_b2", nn.initializers.zeros, (self.num_hops,))
        hidden = jnp.tanh(jnp.einsum("btn,na->bta", series, w1.astype(self.dtype)) + b1.astype(self.dtype)[None, None])
        return jnp.einsum("bta,ar->btr", hidden, w2.astype(self.dtype)) + b2.astype(self.dtype)[None, None]
