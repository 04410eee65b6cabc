"""Dilated causal convolution network (Anderson, EVALITA 2018): a character-level classifier.

Channels last, any length L (tokens [B, L] right-padded with 0):

    e      = Embed(tokens)                       [B, L, E]     E = 16, zero at padding
    x_0    = CausalConv(F, width 3)(e)           [B, L, F]     `causal_conv1d`, F = 128
    h      = ReLU(sum_l skip_l)                  [B, L, F]     `dilated_residual_stack`: 9 layers,
               d_l = act(DilatedCausalConv(F, width 7, dilation 2^(l-1))(x_{l-1}))
               x_l = d_l + P_l x_{l-1},   skip_l = d_l         P_l a width-1 conv
    a      = Attention(h)                        [B, L, F]     `attention` variant (below)
    z      = Conv(J, width 1)(Dropout(a))        [B, L, J]     position logits
    scores = max_{valid t} z_t                   [B, J]        `masked_max_over_time`

Attention variants (`jcaps.ops.attention`, section "Convolutional-network attention"):

    none          a = h
    simplified    a = softmax(Linear(h)) * h             `simplified_attention`, G = 1
    local         a = softmax(CausalConv_3(h)) * h       `local_attention`, G = 1
    simplified8   the same on 8 channel groups           G = 8
    local8                                               G = 8
    dot, dot8     scaled dot-product self-attention      `dot_product_attention`, 1 or 8 heads

The softmax of simplified / local runs over the channels of a group (`attention_axis`
"channels", the default) or over the valid positions ("time"). Its weights sum to one over
that axis, so at a uniform start they scale h by 1/(C/G) (1/128 for G = 1) or 1/L: the head
then sees features 128 times smaller than without attention. `attention_gain` "uniform"
multiplies the block's output by C/G (or by the sequence's valid length over time), so that a
uniform attention passes h on unchanged; "one" (the default) is the paper's block. The gain is
a reparametrisation of the head (a linear map could absorb it), not a new function class.
`attention_residual` adds the block's input to its output, a = h + Attention(h) (the
Transformer's residual connection). Dot-product attention needs it to train: at the start its
weights are near uniform over the positions, so y_t ~ W_o mean_s(W_v h_s) is the same vector at
every position and the max over positions has nothing left to pick from; the residual keeps h_t.

Causality: without attention, position logit z_t depends on the characters t - 3068 .. t only
(receptive field 3 + 6 (2^9 - 1) = 3069, `jcaps.ops.convolution.receptive_field`). It stays so
with simplified / local attention on axis "channels"; dot and dot8, and any variant on axis
"time", read future positions (`is_causal`). Since tokens are right-padded, the causal layers
never read padding at a valid position, the attention masks padded positions and the pool
ignores them: a sequence's scores do not depend on how far its batch pads it.
"""

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jcaps.choices import check_choice
from jcaps.models.choices import DilatedFCNAttention, DilatedFCNAttentionGain
from jcaps.models.dropout import Dropout
from jcaps.models.initializers import uniform
from jcaps.models.outputs import ModelOutput
from jcaps.models.token_ids import padding_mask
from jcaps.ops.attention import (
    ConvAttentionAxis,
    DotProductAttentionParams,
    dot_product_attention,
    local_attention,
    simplified_attention,
)
from jcaps.ops.convolution import Activation, causal_conv1d, dilated_residual_stack, pointwise_conv
from jcaps.ops.pooling import masked_max_over_time

# Channel groups (simplified, local) or heads (dot) of each attention variant.
_ATTENTION_GROUPS = {"dot": 1, "dot8": 8, "simplified": 1, "local": 1, "simplified8": 8, "local8": 8}
# Width of the local attention's causal conv.
_LOCAL_WIDTH = 3


def _check_attention(attention: str, attention_axis: str) -> None:
    check_choice("attention", attention, DilatedFCNAttention)
    check_choice("attention_axis", attention_axis, ConvAttentionAxis)


def is_causal(attention: str, attention_axis: str = "channels") -> bool:
    """Whether position logit t depends on no input after t: false for dot-product attention
    (every position reads every valid one) and for any softmax over time (it normalises over
    the future positions)."""
    _check_attention(attention, attention_axis)
    if attention == "none":
        return True
    return not attention.startswith("dot") and attention_axis == "channels"


# Keras' defaults: U(-0.05, 0.05) embeddings, Glorot-uniform kernels (fans include the conv
# width), zero biases.
_embedding_init = uniform(0.05)
_kernel_init = nn.initializers.glorot_uniform()
# Per-layer (or per-group) kernels stacked on a leading axis: the fans exclude it.
_stacked_kernel_init = nn.initializers.glorot_uniform(batch_axis=(0,))


class DilatedFCN(nn.Module):
    """Dilated causal convolution network (module docstring; defaults and decisions:
    docs/dilated-fcn.md#defaults-and-decisions).

    Attributes:
        vocab_size: V, including PAD (id 0).
        num_classes: J.
        embed_dim: E.
        first_width: width of the first causal conv.
        filters: F, channels of every conv but the head.
        width: width of the residual layers' dilated convs.
        num_layers: residual layers, dilations 1, 2, 4, ..., 2^(num_layers - 1).
        activation: inside the residual layers, one of `jcaps.ops.convolution.Activation`
            ("none", "relu", "gated": tanh(filter) * sigmoid(gate)).
        attention: one of `DilatedFCNAttention`.
        attention_axis: "channels" or "time", the softmax axis of simplified / local attention.
        attention_gain: "one" or "uniform", what multiplies the output of simplified / local
            attention (module docstring).
        attention_residual: a = h + Attention(h) instead of Attention(h) (module docstring).
        dropout_rate: dropout on the features fed to the head (none when 0).
        dtype: activation dtype; parameters are float32.
    """

    vocab_size: int
    num_classes: int
    embed_dim: int = 16
    first_width: int = 3
    filters: int = 128
    width: int = 7
    num_layers: int = 9
    activation: Activation = "none"
    attention: DilatedFCNAttention = "none"
    attention_axis: ConvAttentionAxis = "channels"
    attention_gain: DilatedFCNAttentionGain = "one"
    attention_residual: bool = False
    dropout_rate: float = 0.0
    dtype: Any = jnp.float32

    def __post_init__(self):
        _check_attention(self.attention, self.attention_axis)
        check_choice("attention_gain", self.attention_gain, DilatedFCNAttentionGain)
        check_choice("activation", self.activation, Activation)
        groups = _ATTENTION_GROUPS.get(self.attention, 1)
        if self.filters % groups:
            raise ValueError(f"attention {self.attention!r} needs filters divisible by {groups}, got {self.filters}")
        if self.num_layers < 1:
            raise ValueError(f"num_layers must be at least 1, got {self.num_layers}")
        super().__post_init__()

    @property
    def dilations(self) -> tuple[int, ...]:
        return tuple(2**layer for layer in range(self.num_layers))

    @nn.compact
    def __call__(self, tokens: jax.Array, *, train: bool = False, embeddings: jax.Array | None = None) -> ModelOutput:
        """tokens [B, L] int, 0 = PAD, right-padded; embeddings [B, L, E] character vectors to
        read instead of looking `tokens` up (gradients with respect to each character; `tokens`
        still give the mask).

        Returns scores [B, J] logits (zero for an all-padding row), position_logits [B, L, J],
        embeddings [B, L, E] (the character vectors read) and the attention weights:
        elementwise_attention [B, L, F] for simplified / local, head_attention [B, H, L, L] for
        dot / dot8.
        """
        mask = padding_mask(tokens)
        table = self.param("embedding", _embedding_init, (self.vocab_size, self.embed_dim))
        characters = jnp.take(table.astype(self.dtype), tokens, axis=0) if embeddings is None else embeddings
        # Zero vectors at the pads, like the convs' own left padding; the PAD row is never used.
        embedded = jnp.where(mask[..., None], characters, 0)

        input_kernel, input_bias = self._conv_params("input", self.first_width, self.embed_dim, self.filters)
        x = causal_conv1d(embedded, input_kernel, bias=input_bias)
        features = dilated_residual_stack(
            x, self._residual_layers(), dilations=self.dilations, activation=self.activation
        )
        elementwise_attention = head_attention = None
        if self.attention != "none":
            attended, weights = self._attention(features, mask)
            if self.attention.startswith("dot"):
                head_attention = weights
            else:
                elementwise_attention = weights
            features = features + attended if self.attention_residual else attended
        if self.dropout_rate > 0:
            features = Dropout(self.dropout_rate, deterministic=not train)(features)
        head_kernel = self.param("head_kernel", _kernel_init, (self.filters, self.num_classes))
        head_bias = self.param("head_bias", nn.initializers.zeros, (self.num_classes,))
        position_logits = pointwise_conv(features, head_kernel.astype(self.dtype), bias=head_bias.astype(self.dtype))
        # Positions after a sequence's end hold values (the convs' biases) that must not win.
        scores = masked_max_over_time(position_logits, mask=mask)
        return ModelOutput(
            scores=scores,
            embeddings=characters,
            position_logits=position_logits,
            elementwise_attention=elementwise_attention,
            head_attention=head_attention,
        )

    def _conv_params(self, name: str, width: int, inputs: int, outputs: int) -> tuple[jax.Array, jax.Array]:
        kernel = self.param(f"{name}_kernel", _kernel_init, (width, inputs, outputs))
        bias = self.param(f"{name}_bias", nn.initializers.zeros, (outputs,))
        return kernel.astype(self.dtype), bias.astype(self.dtype)

    def _residual_layers(self) -> list[dict]:
        """The layers' arrays, stored stacked ([num_layers, ...] per kind) and handed to the
        stack one dict per layer."""
        layers, filters = self.num_layers, self.filters
        conv_outputs = 2 * filters if self.activation == "gated" else filters
        stacked = {
            "conv_kernel": self.param(
                "residual_conv_kernel", _stacked_kernel_init, (layers, self.width, filters, conv_outputs)
            ),
            "conv_bias": self.param("residual_conv_bias", nn.initializers.zeros, (layers, conv_outputs)),
            "projection_kernel": self.param("projection_kernel", _stacked_kernel_init, (layers, filters, filters)),
            "projection_bias": self.param("projection_bias", nn.initializers.zeros, (layers, filters)),
        }
        return [{key: value[layer].astype(self.dtype) for key, value in stacked.items()} for layer in range(layers)]

    def _attention(self, x: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
        """The `attention` variant on x [B, L, F] -> (y [B, L, F], weights)."""
        groups, filters = _ATTENTION_GROUPS[self.attention], self.filters
        if self.attention.startswith("dot"):
            kernels = [
                self.param(f"{name}_kernel", _kernel_init, (filters, filters)).astype(self.dtype)
                for name in ("query", "key", "value", "output")
            ]
            return dot_product_attention(x, DotProductAttentionParams(*kernels), mask=mask, num_heads=groups)
        size = filters // groups
        shape: tuple[int, ...]
        if self.attention.startswith("local"):
            op, shape = local_attention, (groups, _LOCAL_WIDTH, size, size)
        else:
            op, shape = simplified_attention, (groups, size, size)
        # Fans of one group's kernel: its C/G channels in and out (times the conv width).
        kernel = self.param("attention_kernel", _stacked_kernel_init, shape).astype(self.dtype)
        bias = self.param("attention_bias", nn.initializers.zeros, (groups, size)).astype(self.dtype)
        y, weights = op(x, kernel, bias=bias, mask=mask, groups=groups, axis=self.attention_axis)
        if self.attention_gain == "uniform":
            if self.attention_axis == "channels":
                gain = jnp.asarray(size, y.dtype)
            else:  # one weight per valid position
                gain = jnp.sum(mask, axis=-1, keepdims=True)[..., None].astype(y.dtype)
            y = y * gain
        return y, weights
