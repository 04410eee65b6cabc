"""Compositional word embeddings: codeword-weighted (CWC) and compositional coding (CC).

A word w owns M rows of code logits `code[w, m]` (K entries each); M codebooks hold K
codewords of size D. The word's vector is a combination of one (CC) or all (CWC) codewords of
every codebook, so V words cost V·M·K + M·K·D parameters instead of V·D. Pure functions on
parameter arrays, usable under `jit`, `vmap` and `grad`.

References:
    Shu, Nakayama. Compressing Word Embeddings via Deep Compositional Code Learning. ICLR 2018
        (compositional codes learned with the straight-through Gumbel-softmax).
    Ren, Lu. Compositional Coding Capsule Network with K-Means Routing for Text Classification.
        Pattern Recognition Letters 2022 (eq. 1: CC embedding; eq. 2: CWC embedding; K^M >= |V|).
"""

from typing import Literal

import jax
import jax.numpy as jnp

from jcaps.ops._arrays import at_least_float32


def num_codewords(vocab_size: int, num_codebooks: int) -> int:
    """K, the smallest integer with K^M >= V: enough codes to tell every word apart.

    Exact integer arithmetic: a floating-point root misses at exact powers (4^8 = 65,536 must
    give 4, and 65,537 must give 5).

    Args:
        vocab_size: V >= 1.
        num_codebooks: M >= 1.

    Returns:
        K >= 1.

    Example:
        >>> from jcaps.ops import num_codewords
        >>> num_codewords(65_536, 8), num_codewords(65_537, 8)
        (4, 5)
    """
    if vocab_size < 1 or num_codebooks < 1:
        raise ValueError(f"need vocab_size >= 1 and num_codebooks >= 1, got {vocab_size}, {num_codebooks}")
    # The float root is within one of the answer; the two loops make it exact.
    k = max(1, round(vocab_size ** (1.0 / num_codebooks)))
    while k**num_codebooks < vocab_size:
        k += 1
    while k > 1 and (k - 1) ** num_codebooks >= vocab_size:
        k -= 1
    return k


def _combine(weights: jax.Array, codebooks: jax.Array) -> jax.Array:
    """sum_m sum_k weights[..., m, k] codebooks[m, k]: [..., M, K] x [M, K, D] -> [..., D].

    One 2-D matmul over the flattened (m, k) axis: XLA:CPU runs it, and its gradient, faster
    than the two-axis contraction."""
    flat = weights.reshape((-1, weights.shape[-2] * weights.shape[-1]))
    out = flat @ codebooks.reshape((-1, codebooks.shape[-1]))
    return out.reshape(weights.shape[:-2] + codebooks.shape[-1:])


def cwc_embedding(ids: jax.Array, code_logits: jax.Array, codebooks: jax.Array) -> jax.Array:
    """Codeword-weighted compositional embedding (Ren & Lu 2022, eq. 2).

        emb(w) = sum_m sum_k softmax_k(code[w, m])_k codebook[m, k]

    The logits are gathered before the softmax, so the cost grows with the number of tokens,
    not with V.

    Args:
        ids: [...] int word ids.
        code_logits: [V, M, K] per-word code logits.
        codebooks: [M, K, D].

    Returns:
        [..., D] embeddings.

    Example:
        With equal code logits every word is the sum over codebooks of the mean codeword:

        >>> import jax.numpy as jnp
        >>> import numpy as np
        >>> from jcaps.ops import cwc_embedding
        >>> code_logits = jnp.zeros((10, 2, 3))  # V = 10 words, M = 2 codebooks of K = 3 codewords
        >>> codebooks = jnp.arange(24.0).reshape(2, 3, 4)  # [M, K, D]
        >>> embedded = cwc_embedding(jnp.array([[1, 2], [3, 0]]), code_logits, codebooks)
        >>> embedded.shape
        (2, 2, 4)
        >>> print(np.asarray(embedded[0, 0]).round(3))  # mean codewords [4, 5, 6, 7] + [16, 17, 18, 19]
        [20. 22. 24. 26.]
    """
    weights = jax.nn.softmax(at_least_float32(jnp.take(code_logits, ids, axis=0)), axis=-1)
    return _combine(weights.astype(codebooks.dtype), codebooks)


def cc_embedding(
    ids: jax.Array,
    code_logits: jax.Array,
    codebooks: jax.Array,
    *,
    rng: jax.Array | None = None,
    sampling: Literal["straight_through", "repeated_argmax"] = "straight_through",
    num_samples: int = 10,
    temperature: float = 1.0,
) -> jax.Array:
    """Compositional coding embedding (Shu & Nakayama 2018; Ren & Lu 2022, eq. 1): one codeword
    per codebook.

        emb(w) = sum_m codebook[m, code(w, m)]

    Evaluation (`rng` None): code(w, m) = argmax_k code[w, m, k], deterministic. Training (`rng`
    given) draws Gumbel noise g per token occurrence, y = softmax((code[w, m] + g) / tau), and
    `sampling` picks how codes come out of it:

      - "straight_through" (Shu & Nakayama): the forward pass uses one_hot(argmax y),
        the backward pass the gradient of y, so the code logits train.
      - "repeated_argmax" (the authors' CCCapsNet code): code = argmax_k sum_r y_r over
        `num_samples` draws; argmax passes no gradient, so the logits keep their
        initialisation and only the codebooks train. The code samples at evaluation too; here
        evaluation takes the many-draw limit, which is argmax_k code[w, m, k] (the expected y
        keeps the order of the logits, the noise being exchangeable).

    Args:
        ids: [...] int word ids.
        code_logits: [V, M, K] per-word code logits.
        codebooks: [M, K, D].
        rng: PRNG key for the Gumbel noise in training; None at evaluation.
        sampling: "straight_through" or "repeated_argmax" (training only).
        num_samples: R, draws summed by "repeated_argmax".
        temperature: tau of the Gumbel-softmax.

    Returns:
        [..., D] embeddings.

    Example:
        Every word's logits pick codeword 1 of each codebook:

        >>> import jax
        >>> import jax.numpy as jnp
        >>> from jcaps.ops import cc_embedding
        >>> code_logits = jnp.zeros((10, 2, 3)).at[:, :, 1].set(1.0)  # [V, M, K]
        >>> codebooks = jnp.arange(24.0).reshape(2, 3, 4)  # [M, K, D]
        >>> print(cc_embedding(jnp.array([4, 7]), code_logits, codebooks))  # codebook[0, 1] + codebook[1, 1]
        [[20. 22. 24. 26.]
         [20. 22. 24. 26.]]
        >>> cc_embedding(jnp.array([4, 7]), code_logits, codebooks, rng=jax.random.key(0)).shape  # training
        (2, 4)
    """
    if sampling not in ("straight_through", "repeated_argmax"):
        raise ValueError(f"sampling must be 'straight_through' or 'repeated_argmax', got {sampling!r}")
    # The noise and the softmax in float32 at least: bfloat16 logits draw the same codes.
    logits = at_least_float32(jnp.take(code_logits, ids, axis=0))
    k = logits.shape[-1]
    if rng is None:
        weights = jax.nn.one_hot(jnp.argmax(logits, axis=-1), k, dtype=codebooks.dtype)
    elif sampling == "straight_through":
        soft = jax.nn.softmax((logits + jax.random.gumbel(rng, logits.shape, logits.dtype)) / temperature, axis=-1)
        hard = jax.nn.one_hot(jnp.argmax(soft, axis=-1), k, dtype=soft.dtype)
        # Forward value `hard`, gradient of `soft`.
        weights = (soft + jax.lax.stop_gradient(hard - soft)).astype(codebooks.dtype)
    else:
        noise = jax.random.gumbel(rng, (num_samples,) + logits.shape, logits.dtype)
        summed = jnp.sum(jax.nn.softmax((logits[None] + noise) / temperature, axis=-1), axis=0)
        weights = jax.nn.one_hot(jnp.argmax(summed, axis=-1), k, dtype=codebooks.dtype)
    return _combine(weights, codebooks)
