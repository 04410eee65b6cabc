"""Capsule primitives: squash, prediction vectors, dynamic and k-means routing.

Pure functions on arrays, usable under `jit`, `vmap` and `grad`. Routing functions take any
number of leading batch axes, so the same call works per example (under `vmap`) and on a batch.

Mixed precision: norms, squash and routing compute in float32 for bfloat16 (or float16) inputs
and return the inputs' dtype. Squared norms are sums of many terms, and routing's logits
accumulate agreements that its softmaxes exponentiate; in bfloat16 both lose the small
differences between capsules that the routing and the class lengths rest on.

References:
    Sabour, Frosst, Hinton. Dynamic Routing Between Capsules. NeurIPS 2017 (eq. 1-3, Procedure 1).
    Ren, Lu. Compositional Coding Capsule Network with K-Means Routing for Text Classification.
    Pattern Recognition Letters 2022 (Algorithm 1).
"""

from collections.abc import Callable
from typing import Literal

import jax
import jax.numpy as jnp

from jcaps.choices import check_choice
from jcaps.ops._arrays import add_bias, at_least_float32

# The agreement between a prediction vector and an output capsule that routing adds to its
# logits (or k-means routing clusters by): their dot product, or the cosine of their angle.
Similarity = Literal["dot", "cosine"]


def _safe_norm(x: jax.Array, axis: int, eps: float) -> jax.Array:
    """`sqrt(sum(x^2) + eps)` with kept dims: finite value and gradient at `x = 0`."""
    return jnp.sqrt(jnp.sum(jnp.square(x), axis=axis, keepdims=True) + eps)


def squash(s: jax.Array, *, axis: int = -1, eps: float = 1e-7) -> jax.Array:
    """Squash non-linearity (Sabour et al. 2017, eq. 1).

        squash(s) = |s|^2 / (1 + |s|^2) * s / |s|,  |s| = sqrt(sum(s^2) + eps)

    The `eps` inside the square root keeps value and gradient finite at `s = 0`, which padding
    and dead capsules produce exactly; it only shortens the output, so norms stay in [0, 1)
    (float32 rounds them to 1 once |s| exceeds a few thousand).

    Args:
        s: [..., dim] capsule vectors (the capsule axis is `axis`).
        axis: the capsule-vector axis.
        eps: added under the square root of the norm.

    Returns:
        [..., dim], same shape as `s`.

    Example:
        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> from jcaps.ops import squash
        >>> v = squash(jnp.array([[3.0, 4.0], [0.0, 0.0]]))
        >>> print(np.asarray(jnp.linalg.norm(v, axis=-1)).round(3))  # |s|^2 / (1 + |s|^2): 25/26 and 0
        [0.962 0.   ]
    """
    wide = at_least_float32(s)
    squared_norm = jnp.sum(jnp.square(wide), axis=axis, keepdims=True)
    return (squared_norm / (1.0 + squared_norm) * wide / jnp.sqrt(squared_norm + eps)).astype(s.dtype)


def capsule_length(v: jax.Array) -> jax.Array:
    """Exact capsule length |v| over the last axis, with a finite (zero) gradient at v = 0.

    Class scores are lengths; a fully padded example with zero-initialised biases gives
    exactly zero capsules, where a plain `sqrt` would have an infinite derivative.

    Args:
        v: [..., dim].

    Returns:
        [...] lengths.

    Example:
        >>> import jax.numpy as jnp
        >>> from jcaps.ops import capsule_length
        >>> print(capsule_length(jnp.array([[3.0, 4.0], [0.0, 0.0]])))
        [5. 0.]
    """
    squared = jnp.sum(jnp.square(at_least_float32(v)), axis=-1)
    positive = squared > 0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, squared, 1)), 0).astype(v.dtype)


def shared_prediction_vectors(u: jax.Array, weight: jax.Array, *, bias: jax.Array | None = None) -> jax.Array:
    """Prediction vectors with one transform per output capsule, shared over inputs.

        u_hat[i, j] = W[j] @ u[i] + b[j]

    Args:
        u: [..., in_caps, d_in] input capsules.
        weight: [out_caps, d_out, d_in].
        bias: optional [out_caps, d_out].

    Returns:
        u_hat: [..., in_caps, out_caps, d_out].

    Example:
        >>> import jax.numpy as jnp
        >>> from jcaps.ops import shared_prediction_vectors
        >>> u = jnp.ones((2, 6, 4))  # [B, in_caps, d_in]
        >>> shared_prediction_vectors(u, jnp.ones((3, 8, 4)), bias=jnp.zeros((3, 8))).shape
        (2, 6, 3, 8)
    """
    return add_bias(jnp.einsum("...id,jed->...ije", u, weight), bias)


def unshared_prediction_vectors(u: jax.Array, weight: jax.Array, *, bias: jax.Array | None = None) -> jax.Array:
    """Prediction vectors with one transform per (input, output) pair (Sabour et al., eq. 2).

        u_hat[i, j] = W[i, j] @ u[i] + b[i, j]

    Args:
        u: [..., in_caps, d_in] input capsules.
        weight: [in_caps, out_caps, d_out, d_in].
        bias: optional [in_caps, out_caps, d_out].

    Returns:
        u_hat: [..., in_caps, out_caps, d_out].

    Example:
        >>> import jax.numpy as jnp
        >>> from jcaps.ops import unshared_prediction_vectors
        >>> u = jnp.ones((2, 6, 4))  # [B, in_caps, d_in]
        >>> unshared_prediction_vectors(u, jnp.ones((6, 3, 8, 4))).shape
        (2, 6, 3, 8)
    """
    return add_bias(jnp.einsum("...id,ijed->...ije", u, weight), bias)


def _output_major(u_hat: jax.Array, mask: jax.Array | None) -> tuple[jax.Array, jax.Array | None]:
    """Moves u_hat to [..., out_caps, in_caps, dim] and zeroes padded input capsules.

    In this layout both routing contractions are batched matrix-vector products over leading
    axes, which XLA on CPU runs about twice as fast as in the input-major layout; the transpose
    is paid once, not every iteration. Padding is zeroed with `where` rather than a product so
    that non-finite values in padded slots cannot leak in.

    Returns:
        u_t: [..., out_caps, in_caps, dim].
        valid: [..., 1, in_caps] booleans, or None without a mask.
    """
    u_t = jnp.swapaxes(u_hat, -3, -2)
    if mask is None:
        return u_t, None
    valid = jnp.asarray(mask).astype(bool)[..., None, :]
    return jnp.where(valid[..., None], u_t, jnp.zeros_like(u_t)), valid


def _input_major_coupling(c_t: jax.Array, valid: jax.Array | None) -> jax.Array:
    """[..., out_caps, in_caps] coefficients to [..., in_caps, out_caps], padded rows 0."""
    if valid is not None:
        c_t = jnp.where(valid, c_t, jnp.zeros_like(c_t))
    return jnp.swapaxes(c_t, -1, -2)


def _weighted_sum(c_t: jax.Array, u_t: jax.Array) -> jax.Array:
    """s[..., j, :] = sum_i c[i, j] u_hat[i, j, :], in output-major layout."""
    return jnp.einsum("...ji,...jid->...jd", c_t, u_t)


def _agreement(u_t: jax.Array, v: jax.Array) -> jax.Array:
    """a[..., j, i] = <u_hat[i, j, :], v[j, :]>, in output-major layout."""
    return jnp.einsum("...jid,...jd->...ji", u_t, v)


def dynamic_routing(
    u_hat: jax.Array,
    *,
    num_iterations: int,
    mask: jax.Array | None = None,
    similarity: Literal["dot", "cosine"] = "dot",
    coupling: Callable[..., jax.Array] = jax.nn.softmax,
    eps: float = 1e-7,
) -> tuple[jax.Array, jax.Array]:
    """Routing-by-agreement (Sabour et al. 2017, Procedure 1).

        b = 0
        repeat r times:
            c[i, :] = softmax_j(b[i, :])
            v_j = squash(sum_i c[i, j] u_hat[i, j])
            b[i, j] += <u_hat[i, j], v_j>   (skipped after the last v: it is never read)

    `coupling` replaces softmax_j, the step from logits to coupling coefficients: a tempered
    softmax (softmax(lambda b), an inverse temperature on the agreement) or the leaky softmax of
    Zhao et al. (2018) are functions of b passed here, not options of the routing.
    `similarity="cosine"` replaces the agreement by <u_hat[i, j] / |u_hat[i, j]|, v_j / |v_j|>
    (the similarity of k-means routing): the logits then rank how well a prediction points
    along v_j, not how far it reaches, so long input capsules no longer lead every class.

    The loop is a `lax.fori_loop` with a static trip count, so reverse-mode gradients flow
    through every iteration; it is unrolled, since r is small and XLA then fuses across
    iterations.

    Args:
        u_hat: [..., in_caps, out_caps, dim] prediction vectors.
        num_iterations: r >= 1, a Python int.
        mask: optional [..., in_caps], 1 (or True) for real input capsules, 0 for padding. Padded
            capsules contribute nothing to `v` or to the agreement, receive zero gradient, and
            their rows of the returned `c` are 0.
        similarity: "dot" (the paper) or "cosine", the agreement added to the logits.
        coupling: `coupling(b, axis=a)` -> c, normalising the logits b over the out_caps axis
            `a` (its shape kept); `jax.nn.softmax` in the paper. Gradients flow through it, so
            it may close over learned parameters.
        eps: squash epsilon.

    Returns:
        v: [..., out_caps, dim] output capsules, norms in [0, 1).
        c: [..., in_caps, out_caps] the coupling coefficients that produced `v`; each valid row
            sums to 1 over out_caps (with the softmax), padded rows are 0.

    Example:
        Two examples, the second with two padded input capsules:

        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> from jcaps.ops import dynamic_routing
        >>> u_hat = jnp.ones((2, 6, 3, 8))  # [B, in_caps, out_caps, dim]
        >>> mask = jnp.array([[True] * 6, [True, True, True, True, False, False]])
        >>> v, c = dynamic_routing(u_hat, num_iterations=3, mask=mask)
        >>> v.shape, c.shape
        ((2, 3, 8), (2, 6, 3))
        >>> print(np.asarray(c[1].sum(axis=-1)).round(3))  # padded capsules route nothing
        [1. 1. 1. 1. 0. 0.]
    """
    if num_iterations < 1:
        raise ValueError(f"num_iterations must be >= 1, got {num_iterations}")
    check_choice("similarity", similarity, Similarity)
    u_t, valid = _output_major(at_least_float32(u_hat), mask)
    key_norm = _safe_norm(u_t, -1, eps)[..., 0] if similarity == "cosine" else None

    def route(c_t):
        return squash(_weighted_sum(c_t, u_t), eps=eps)

    def agreement(v):
        if key_norm is None:
            return _agreement(u_t, v)
        return _agreement(u_t, v / _safe_norm(v, -1, eps)) / key_norm

    def iterate(_, carry):
        logits, _, v = carry
        logits = logits + agreement(v)
        c_t = coupling(logits, axis=-2)
        return logits, c_t, route(c_t)

    start_logits = jnp.zeros(u_t.shape[:-1], u_t.dtype)
    # The softmax of the zero start logits is 1/J, written out so that XLA does not
    # constant-fold a softmax as large as c when compiling.
    c_t = (
        jnp.full_like(start_logits, 1.0 / u_t.shape[-3])
        if coupling is jax.nn.softmax
        else coupling(start_logits, axis=-2)
    )
    _, c_t, v = jax.lax.fori_loop(0, num_iterations - 1, iterate, (start_logits, c_t, route(c_t)), unroll=True)
    return v.astype(u_hat.dtype), _input_major_coupling(c_t, valid).astype(u_hat.dtype)


def kmeans_routing(
    u_hat: jax.Array,
    *,
    num_iterations: int,
    mask: jax.Array | None = None,
    similarity: Literal["cosine", "dot"] = "cosine",
    eps: float = 1e-7,
) -> tuple[jax.Array, jax.Array]:
    """K-means routing (Ren & Lu 2022, Algorithm 1).

        v_j = (1/J) sum_i u_hat[i, j]
        repeat r times:
            c[i, :] = softmax_j(sim(u_hat[i, j], v_j))   (logits replaced, not accumulated)
            v_j = sum_i c[i, j] u_hat[i, j]             (no squash inside the loop)
        return squash(v), c

    Looped like `dynamic_routing` (static trip count, unrolled). `sim` is `cosine`,
    <u_hat / |u_hat|, v / |v|> (the paper), or `dot`, <u_hat, v / |v|> (the authors' code).
    Both ignore the scale of `v`, so the 1/J of the start (kept as the paper writes it) does
    not change the result. Norms are `sqrt(sum(x^2) + eps)`: finite, with finite gradients, at
    zero.

    Args:
        u_hat: [..., in_caps, out_caps, dim] prediction vectors.
        num_iterations: r >= 1, a Python int.
        similarity: "cosine" or "dot".
        mask: optional [..., in_caps], 1 (or True) for real input capsules, 0 for padding. Padded
            capsules are left out of the starting mean and of every update, receive zero gradient,
            and their rows of the returned `c` are 0.
        eps: added under every square root of a norm (normalisation and squash).

    Returns:
        v: [..., out_caps, dim] squashed cluster centres, norms in [0, 1).
        c: [..., in_caps, out_caps] the coupling coefficients that produced `v`; each valid row
            sums to 1 over out_caps, padded rows are 0.

    Example:
        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> from jcaps.ops import kmeans_routing
        >>> u_hat = jnp.ones((6, 3, 8))  # one example: [in_caps, out_caps, dim]
        >>> v, c = kmeans_routing(u_hat, num_iterations=3, mask=jnp.array([True, True, True, True, False, False]))
        >>> v.shape, c.shape
        ((3, 8), (6, 3))
        >>> print(np.asarray(c[:, 0]).round(3))  # equal predictions: equal shares for the valid capsules
        [0.333 0.333 0.333 0.333 0.    0.   ]
    """
    if num_iterations < 1:
        raise ValueError(f"num_iterations must be >= 1, got {num_iterations}")
    check_choice("similarity", similarity, Similarity)
    u_t, valid = _output_major(at_least_float32(u_hat), mask)
    # Cosine divides each logit by |u_hat[i, j]| rather than normalising a copy of u_hat: the
    # same numbers without a second array (and gradient) as large as u_hat.
    key_norm = _safe_norm(u_t, -1, eps)[..., 0] if similarity == "cosine" else None

    def route(v):
        logits = _agreement(u_t, v / _safe_norm(v, -1, eps))
        if key_norm is not None:
            logits = logits / key_norm
        c_t = jax.nn.softmax(logits, axis=-2)
        return c_t, _weighted_sum(c_t, u_t)

    v = jnp.sum(u_t, axis=-2) / u_t.shape[-3]
    v = jax.lax.fori_loop(0, num_iterations - 1, lambda _, v: route(v)[1], v, unroll=True)
    c_t, v = route(v)
    return squash(v, eps=eps).astype(u_hat.dtype), _input_major_coupling(c_t, valid).astype(u_hat.dtype)


def routing_contributions(u_hat: jax.Array, coupling: jax.Array, *, eps: float = 1e-7) -> jax.Array:
    """How much of each output capsule every input capsule supplies, along its direction.

        s_j = sum_i c[i, j] u_hat[i, j]             (the routed sum that v_j squashes)
        contribution[i, j] = c[i, j] <u_hat[i, j], s_j / |s_j|>

    The contributions of one output capsule sum to |s_j| (exactly, up to `eps`), so they split
    its pre-squash length among the input capsules; one is negative when that capsule's
    prediction points away from s_j. Both routings return v_j parallel to s_j, so the direction
    is v_j's. Rows of padded input capsules, whose coupling is 0, are 0.

    Args:
      u_hat: [..., in_caps, out_caps, dim] prediction vectors.
      coupling: [..., in_caps, out_caps] the coupling coefficients routing returned with them.
      eps: under the square root of |s_j|.

    Returns:
      [..., in_caps, out_caps] contributions.

    Example:
        >>> import jax.numpy as jnp
        >>> from jcaps.ops import routing_contributions
        >>> u_hat = jnp.array([[[3.0, 0.0]], [[1.0, 0.0]]])  # two input capsules, one output
        >>> routing_contributions(u_hat, jnp.full((2, 1), 0.5))[:, 0].tolist()  # |s| = 2
        [1.5, 0.5]
    """
    # A padded capsule's u_hat may hold anything (routing never reads it): zero it first.
    wide_coupling = at_least_float32(coupling)[..., None]
    weighted = jnp.where(wide_coupling != 0, at_least_float32(u_hat), 0) * wide_coupling
    s = jnp.sum(weighted, axis=-3, keepdims=True)
    return jnp.sum(weighted * (s / _safe_norm(s, -1, eps)), axis=-1).astype(u_hat.dtype)
