"""Array helpers shared by the ops: padding masks, bias addition, leading batch axes, the
dtype that normalisations compute in.

Masks are boolean arrays over the leading axes of the values they mark ([..., T] for values
[..., T, F]), True at real positions.
"""

import math

import jax
import jax.numpy as jnp


def valid_positions(mask: jax.Array | None, shape: tuple[int, ...]) -> jax.Array:
    """`mask` as booleans of `shape` ([..., T]); all True without a mask."""
    return jnp.ones(shape, bool) if mask is None else jnp.asarray(mask).astype(bool)


def zero_padding(x: jax.Array, mask: jax.Array | None) -> jax.Array:
    """x [..., T, ...] with zeros where mask [..., T] (its leading axes) is False; x itself
    without a mask. `where`, not a product: padding holding inf or NaN stays out, as 0 * inf
    is NaN."""
    if mask is None:
        return x
    mask = mask.reshape(mask.shape + (1,) * (x.ndim - mask.ndim))
    return jnp.where(mask, x, jnp.zeros_like(x))


def add_bias(x: jax.Array, bias: jax.Array | None) -> jax.Array:
    """x [..., C] + bias [C] (or any trailing shape of x) in x's dtype, broadcast explicitly
    (the tests forbid implicit rank promotion); x itself without a bias."""
    if bias is None:
        return x
    return x + jnp.broadcast_to(bias.astype(x.dtype), x.shape)


def merge_leading_axes(x: jax.Array, trailing: int) -> tuple[jax.Array, tuple[int, ...]]:
    """x [*lead, *rest] with `trailing` = len(rest) axes in `rest` -> ([prod(lead), *rest],
    lead), for ops whose primitives (a convolution, a time-major scan) take exactly one batch
    axis; an unbatched x gets a batch axis of 1."""
    lead = x.shape[: x.ndim - trailing]
    return x.reshape((math.prod(lead),) + x.shape[x.ndim - trailing :]), lead


def split_leading_axes(x: jax.Array, lead: tuple[int, ...]) -> jax.Array:
    """[prod(lead), *rest] -> [*lead, *rest], undoing `merge_leading_axes`."""
    return x.reshape(lead + x.shape[1:])


def normalisation_dtype(dtype) -> jnp.dtype:
    """The dtype a softmax, log-sum-exp, norm or loss computes in for inputs of `dtype`: float32
    for narrower floats (bfloat16, float16), `dtype` itself otherwise. Their exponentials and
    sums over many terms lose too much in bfloat16's 8-bit mantissa (equinox's attention and
    flax's `force_fp32_for_softmax` upcast likewise); the matmuls around them stay narrow."""
    dtype = jnp.dtype(dtype)
    return jnp.dtype(jnp.float32) if jnp.finfo(dtype).bits < 32 else dtype


def at_least_float32(x: jax.Array) -> jax.Array:
    """x in `normalisation_dtype(x.dtype)`: bfloat16 and float16 become float32."""
    return x.astype(normalisation_dtype(x.dtype))
