"""Causal convolutions and the dilated residual stack of the dilated causal convolution network.

Pure functions on arrays, usable under `jit`, `vmap` and `grad`. Sequences are channels last,
[..., L, C] with any leading batch axes (none for a single sequence); kernels are
[W, C_in, C_out] (width first, as `lax` reads "WIO").

A causal convolution of width W and dilation d sees, at position t, the inputs

    y_t = b + sum_{k=0}^{W-1} K_k x_{t - (W-1-k) d}          (x_s = 0 for s < 0)

so it reaches (W - 1) d positions into the past and none into the future. A residual layer
(Anderson 2018, after WaveNet) is

    d      = act(DilatedCausalConv(x))                      act: none | relu | gated
    x_next = d + P x                                        P a learned width-1 conv (a matmul)
    skip   = d

with gated = tanh(conv_f(x)) * sigmoid(conv_g(x)) (WaveNet Sec. 2.3; one conv with 2C outputs,
filter half first). The stack's output is ReLU(sum of skips). A first conv of width W_0 then
layers of width W and dilations d_1..d_n see W_0 + (W - 1) sum_l d_l positions
(`receptive_field`): 3 + 6 (2^9 - 1) = 3069 for the network's defaults.

Padding: tokens are right-padded, so a causal conv never mixes padding into a valid position;
the values these ops produce at padded positions are not zeroed and must be masked by whatever
reads them (a global max pool: `jcaps.ops.pooling.masked_max_over_time`).

References:
  Anderson. The dilated causal convolution network of the ITAmoji task, EVALITA 2018 (CEUR-WS
  Vol-2263; char embedding, causal conv, 9 dilated residual layers, ReLU of summed skips,
  width-1 conv head, global max pool; docs/dilated-fcn.md#equations).
  van den Oord, Dieleman, Zen, Simonyan, Vinyals, Graves, Kalchbrenner, Senior, Kavukcuoglu.
  WaveNet: A Generative Model for Raw Audio. 2016 (Sec. 2.1 dilated causal convolutions,
  Sec. 2.3 gated activation units, Sec. 2.4 residual and skip connections).
"""

from collections.abc import Mapping, Sequence
from typing import Literal

import jax
import jax.numpy as jnp
from jax import lax

from jcaps.choices import check_choice
from jcaps.ops._arrays import add_bias, merge_leading_axes, split_leading_axes

# The activation inside a residual layer.
Activation = Literal["none", "relu", "gated"]
# The order in which a residual layer given as a tuple holds its arrays.
LAYER_KEYS = ("conv_kernel", "conv_bias", "projection_kernel", "projection_bias")


def causal_conv1d(
    x: jax.Array,
    kernel: jax.Array,
    *,
    bias: jax.Array | None = None,
    dilation: int = 1,
    groups: int = 1,
) -> jax.Array:
    """Dilated causal convolution: output t sees only inputs t - (W-1) dilation .. t.

        y_t = b + sum_{k=0}^{W-1} K_k x_{t - (W-1-k) dilation}       (x_s = 0 for s < 0)

    (W - 1) * dilation zeros are padded on the left and none on the right, so the output has
    the input's length and K_{W-1} multiplies the current input.

    Args:
      x: [..., L, C_in].
      kernel: [W, C_in / groups, C_out].
      bias: optional [C_out].
      dilation: static int >= 1.
      groups: static int; with G groups, input channels [g C_in/G, (g+1) C_in/G) feed output
        channels [g C_out/G, (g+1) C_out/G) only (a block-diagonal conv).

    Returns:
      [..., L, C_out].

    Example:
      Width 2 and dilation 2: y_t = x_{t-2} + x_t.

      >>> import jax.numpy as jnp
      >>> from jcaps.ops import causal_conv1d
      >>> x = jnp.arange(5.0)[:, None]  # one sequence: [L, C_in]
      >>> print(causal_conv1d(x, jnp.ones((2, 1, 1)), dilation=2)[:, 0])
      [0. 1. 2. 4. 6.]
    """
    dtype = jnp.result_type(x, kernel)
    # Taps that reach back L or more positions read only the left padding at every output:
    # they are left out (the sequence length is static), which makes the large dilations of a
    # stack cheap on short inputs (at L = 64, dilations 64..256 keep one tap of seven).
    width, length = kernel.shape[0], x.shape[-2]
    first = next(k for k in range(width) if (width - 1 - k) * dilation < max(length, 1))
    kernel = kernel[first:]
    pad = (kernel.shape[0] - 1) * dilation
    # lax's convolution takes exactly one batch axis.
    x, lead = merge_leading_axes(x.astype(dtype), 2)
    y = lax.conv_general_dilated(
        x,
        kernel.astype(dtype),
        window_strides=(1,),
        padding=((pad, 0),),
        rhs_dilation=(dilation,),
        dimension_numbers=("NWC", "WIO", "NWC"),
        feature_group_count=groups,
    )
    return add_bias(split_leading_axes(y, lead), bias)


def pointwise_conv(x: jax.Array, kernel: jax.Array, *, bias: jax.Array | None = None) -> jax.Array:
    """Width-1 convolution, a matmul per position: x [..., L, C_in], kernel [C_in, C_out], bias
    optional [C_out] -> [..., L, C_out].

    Example:
      >>> import jax.numpy as jnp
      >>> from jcaps.ops import pointwise_conv
      >>> pointwise_conv(jnp.ones((2, 5, 3)), jnp.ones((3, 4)), bias=jnp.zeros(4)).shape
      (2, 5, 4)
    """
    dtype = jnp.result_type(x, kernel)
    return add_bias(jnp.einsum("...c,cd->...d", x.astype(dtype), kernel.astype(dtype)), bias)


def _activate(conv: jax.Array, activation: Activation) -> jax.Array:
    """act(conv) for a conv output [..., C] (gated: [..., 2C], filter half first -> [..., C])."""
    if activation == "relu":
        return jax.nn.relu(conv)
    if activation == "gated":
        filter_part, gate_part = jnp.split(conv, 2, axis=-1)
        return jnp.tanh(filter_part) * jax.nn.sigmoid(gate_part)
    return conv


def residual_layer(
    x: jax.Array,
    conv_kernel: jax.Array,
    conv_bias: jax.Array | None,
    projection_kernel: jax.Array,
    projection_bias: jax.Array | None,
    *,
    dilation: int,
    activation: Activation = "none",
) -> tuple[jax.Array, jax.Array]:
    """One residual layer: d = act(DilatedCausalConv(x)); x_next = d + P x; skip = d.

    Args:
      x: [..., L, C_in].
      conv_kernel: [W, C_in, C] ([W, C_in, 2C] for `gated`: filter half, then gate half).
      conv_bias: optional [C] ([2C] for `gated`).
      projection_kernel: [C_in, C], P (a width-1 conv).
      projection_bias: optional [C].
      dilation: static int >= 1.
      activation: "none", "relu" or "gated" (tanh(filter) * sigmoid(gate), WaveNet).

    Returns:
      x_next: [..., L, C], the next layer's input.
      skip: [..., L, C], d.

    Example:
      >>> import jax.numpy as jnp
      >>> from jcaps.ops import residual_layer
      >>> x = jnp.ones((2, 5, 4))  # [B, L, C]
      >>> conv_kernel = jnp.ones((3, 4, 8))  # gated: filter and gate halves of 4 channels each
      >>> x_next, skip = residual_layer(x, conv_kernel, None, jnp.eye(4), None, dilation=2, activation="gated")
      >>> x_next.shape, skip.shape
      ((2, 5, 4), (2, 5, 4))
    """
    check_choice("activation", activation, Activation)
    outputs = conv_kernel.shape[-1]
    if activation == "gated" and outputs % 2:
        raise ValueError(f"a gated layer's conv needs an even number of outputs (filter and gate), got {outputs}")
    d = _activate(causal_conv1d(x, conv_kernel, bias=conv_bias, dilation=dilation), activation)
    return d + pointwise_conv(x, projection_kernel, bias=projection_bias), d


def _layer_arrays(layer) -> tuple[jax.Array, jax.Array | None, jax.Array, jax.Array | None]:
    """A layer given as a mapping (keys `LAYER_KEYS`) or as a tuple in that order."""
    conv_kernel, conv_bias, projection_kernel, projection_bias = (
        (layer[key] for key in LAYER_KEYS) if isinstance(layer, Mapping) else layer
    )
    return conv_kernel, conv_bias, projection_kernel, projection_bias


def dilated_residual_stack(
    x: jax.Array,
    layers: Sequence,
    *,
    dilations: Sequence[int],
    activation: Activation = "none",
) -> jax.Array:
    """ReLU of the summed skips of a stack of `residual_layer`s.

        x_0 = x;   x_l, skip_l = residual_layer(x_{l-1}, ..., dilation d_l);   y = ReLU(sum_l skip_l)

    Args:
      x: [..., L, C].
      layers: one entry per layer, a mapping with keys `LAYER_KEYS` (conv_kernel [W, C, C or
        2C], conv_bias, projection_kernel [C, C], projection_bias) or a tuple in that order.
      dilations: static ints, one per layer (the network uses 1, 2, 4, ..., 256).
      activation: "none", "relu" or "gated", for every layer.

    Returns:
      [..., L, C]; output t sees inputs t - (W-1) sum_l d_l .. t.

    Example:
      >>> import jax.numpy as jnp
      >>> from jcaps.ops import dilated_residual_stack
      >>> layer = {"conv_kernel": jnp.ones((2, 4, 4)), "conv_bias": None,
      ...          "projection_kernel": jnp.eye(4), "projection_bias": None}
      >>> dilated_residual_stack(jnp.ones((5, 4)), [layer, layer], dilations=[1, 2]).shape
      (5, 4)
    """
    check_choice("activation", activation, Activation)
    if len(layers) != len(dilations):
        raise ValueError(f"got {len(layers)} layers but {len(dilations)} dilations")
    if not layers:
        raise ValueError("a residual stack needs at least one layer")
    x, skips = residual_layer(x, *_layer_arrays(layers[0]), dilation=dilations[0], activation=activation)
    for layer, dilation in zip(layers[1:], dilations[1:]):
        x, skip = residual_layer(x, *_layer_arrays(layer), dilation=dilation, activation=activation)
        skips = skips + skip
    return jax.nn.relu(skips)


def receptive_field(first_width: int, width: int, dilations: Sequence[int]) -> int:
    """Positions an output sees: a first causal conv of width `first_width` (dilation 1), then
    residual layers of width `width` and the given dilations; the residual projections have
    width 1 and add nothing. first_width + (width - 1) sum(dilations): 3069 for (3, 7, 1..256).

    Example:
      >>> from jcaps.ops import receptive_field
      >>> receptive_field(3, 7, [2**i for i in range(9)])
      3069
    """
    return first_width + (width - 1) * sum(dilations)
