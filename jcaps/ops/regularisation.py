"""Inverted dropout with a mask drawn from a few random bits per element.

    keep ~ Bernoulli(p),   dropout(x) = x * keep / p,   so E[dropout(x)] = x

`jax.random.bernoulli` draws one 32-bit number per element; on CPU, generating those numbers
costs several times the multiply they gate, and several times the same mask drawn from 8-bit
numbers (`benchmarks/dropout_mask.py`). Here each 32-bit draw
is cut into four 8-bit (or two 16-bit) numbers u, and an element is kept when u >= t with
t = round(rate * 2^bits): 8 bits when rate * 256 is a whole number (0.5, 0.25, 0.125, ... are then
exact), 16 bits otherwise (the rate used is t / 65536, within 2^-17 of the one asked for). The
scale 1 / p is that of the keep probability p = 1 - t / 2^bits actually drawn, so the expectation
is exact either way.
"""

import jax
import jax.numpy as jnp
import numpy as np


def drop_threshold(rate: float) -> tuple[int, int]:
    """rate -> (bits per element, t): an element is dropped when its `bits`-bit draw is < t."""
    bits = 8 if float(rate * 256).is_integer() else 16
    return bits, round(rate * 2**bits)


def keep_mask(key: jax.Array, rate: float, shape: tuple[int, ...]) -> jax.Array:
    """A [*shape] bool mask, True with probability 1 - t / 2^bits (`drop_threshold(rate)`).

    One 32-bit draw per 32 / bits elements, bit-cast to unsigned `bits`-bit numbers."""
    bits, threshold = drop_threshold(rate)
    per_draw = 32 // bits
    size = int(np.prod(shape, dtype=np.int64))
    draws = jax.random.bits(key, (-(-size // per_draw),), jnp.uint32)
    small = jax.lax.bitcast_convert_type(draws, jnp.dtype(f"uint{bits}")).reshape(-1)
    return (small[:size] >= threshold).reshape(shape)


def dropout(x: jax.Array, *, rate: float, key: jax.Array | None) -> jax.Array:
    """Inverted dropout of x [...] at a static `rate` in [0, 1]; the identity when `key` is None
    (evaluation) or the rate rounds to 0, zeros when it rounds to 1.

    Args:
        x: [...] any float array.
        rate: the probability of dropping an element (a Python float, fixed at trace time).
        key: a PRNG key, or None.

    Returns:
        [...] x * keep / p, keep from `keep_mask` (p its keep probability).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from jcaps.ops.regularisation import dropout
        >>> y = dropout(jnp.ones(8), rate=0.5, key=jax.random.key(0))
        >>> sorted(set(y.tolist()))  # dropped, or scaled by 1 / 0.5
        [0.0, 2.0]
        >>> dropout(jnp.ones(3), rate=0.5, key=None).tolist()
        [1.0, 1.0, 1.0]
    """
    if not 0 <= rate <= 1:
        raise ValueError(f"dropout rate {rate} is outside [0, 1]")
    bits, threshold = drop_threshold(rate)
    if key is None or threshold == 0:
        return x
    if threshold == 2**bits:
        return jnp.zeros_like(x)
    keep_probability = 1 - threshold / 2**bits
    return jnp.where(keep_mask(key, rate, x.shape), x / keep_probability, jnp.zeros_like(x))
