"""The recurrent layer of the models: a GRU or an LSTM, one or two directions, with PyTorch's
parameters and initialisation, over the scans of `jcaps.ops.recurrent` (an LSTM also through
cuDNN, `jcaps.models.cudnn_lstm`)."""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jcaps.choices import check_choice
from jcaps.models.choices import RNNImpl
from jcaps.models.cudnn_lstm import cudnn_lstm_layer, cudnn_unavailable, warn_scan_fallback
from jcaps.models.initializers import uniform
from jcaps.ops.recurrent import bidirectional_gru, bidirectional_lstm, gru_scan, lstm_scan

# cell -> (gates per hidden unit, one-direction scan, two-direction layer)
CELLS = {"gru": (3, gru_scan, bidirectional_gru), "lstm": (4, lstm_scan, bidirectional_lstm)}


class RecurrentLayer(nn.Module):
    """One GRU or LSTM layer reading a sequence forward, or forward and backward.

    Parameters carry the direction on a leading axis (forward[, backward]) and the gates in
    PyTorch's order ((r, z, n) for a GRU, (i, f, g, o) for an LSTM): input_kernel [K, D, GH],
    input_bias [K, GH], hidden_kernel [K, H, GH], hidden_bias [K, GH], all
    U(-1/sqrt(H), 1/sqrt(H)) as PyTorch initialises them.

    Attributes:
        cell: "gru" or "lstm".
        hidden_dim: H.
        num_directions: K, 1 (forward) or 2 (forward and backward).
        dtype: activation dtype; parameters are float32.
        rnn_impl: "scan" (`jcaps.ops.recurrent`) or, for an LSTM, "cudnn": cuDNN's fused
            kernel on a GPU with float32 activations, the scan elsewhere (one warning). Same
            parameters and values; cuDNN needs prefix masks (trailing pads) and no `vmap`.
    """

    cell: str
    hidden_dim: int
    num_directions: int = 2
    dtype: Any = jnp.float32
    rnn_impl: RNNImpl = "scan"

    def __post_init__(self):
        check_choice("rnn_impl", self.rnn_impl, RNNImpl)
        if self.rnn_impl == "cudnn" and self.cell != "lstm":
            raise ValueError(f"rnn_impl='cudnn' runs LSTM layers only, not {self.cell!r}")
        super().__post_init__()

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array | None) -> jax.Array:
        """x [..., T, D], mask [..., T] bool or None -> [..., T, K, H] states of each direction
        in input time order (zero at padded steps); a backward direction starts at each
        sequence's own last valid step."""
        num_gates, scan, bidirectional = CELLS[self.cell]
        init = uniform(self.hidden_dim**-0.5)
        gates, directions = num_gates * self.hidden_dim, self.num_directions
        weights = [
            self.param("input_kernel", init, (directions, x.shape[-1], gates)),
            self.param("input_bias", init, (directions, gates)),
            self.param("hidden_kernel", init, (directions, self.hidden_dim, gates)),
            self.param("hidden_bias", init, (directions, gates)),
        ]
        x = x.astype(self.dtype)
        input_kernel, input_bias, hidden_kernel, hidden_bias = (w.astype(self.dtype) for w in weights)
        if self.rnn_impl == "cudnn":
            reason = cudnn_unavailable(self.dtype)
            if reason is None:
                return cudnn_lstm_layer(x, mask, input_kernel, input_bias, hidden_kernel, hidden_bias)
            warn_scan_fallback(reason)
        if directions == 2:
            return bidirectional(x, input_kernel, input_bias, hidden_kernel, hidden_bias, mask=mask)
        input_gates = x @ input_kernel[0]
        input_gates = input_gates + jnp.broadcast_to(input_bias[0], input_gates.shape)
        return scan(input_gates, hidden_kernel[0], hidden_bias[0], mask=mask)[..., None, :]
