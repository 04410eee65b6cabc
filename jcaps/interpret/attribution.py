"""Per-token attributions of a text classifier, as pure functions of its input vectors.

Each function takes a batched score function of the input vectors, `score_fn(e) -> [B, C]`
with e [B, T, D] (every jcaps text model gives one: `model.apply(v, tokens, embeddings=e)`,
`tokens` closed over for the mask), the vectors e of the batch, the explained output c per
example, and the mask of real tokens [B, T]; it returns signed per-token scores [B, T] that are
0 at padding. The output explained is the model's raw score for c (a logit, a capsule length,
or what the caller's `score_fn` returns: a sigmoid probability, a log-probability).

  * gradient:             ||d f_c / d e_t||_2                       (Simonyan et al. 2014)
  * gradient_x_input:     sum_d e_td * d f_c / d e_td                (Shrikumar et al. 2016)
  * integrated_gradients: sum_d of IG(e)_td, the path integral from the baseline e' (zeros) to
                          e; sum_t IG_t ~ f_c(e) - f_c(e') (completeness; `completeness_error`)
                          (Sundararajan et al. 2017)
  * smoothgrad:           ||mean_m |d f_c / d e (e + eps_m)| ||_2 over D (Smilkov et al. 2017)
  * occlusion:            f_c(e) - f_c(e with e_t := e'_t), every t of the batch in one `vmap`
                          (leave one token out; Zeiler & Fergus 2014)
  * random:               uniform random scores at the real tokens: the baseline ranking that
                          every faithfulness score is compared with

Integrated gradients and SmoothGrad are those of `jcaps.interpret.saliency` (one implementation
for series and text), reduced over the vector dimension here. Functions are jit-compatible with
`score_fn` and the keyword options static. `score_fn` must treat examples independently and
accept any whole number k of copies of the batch stacked as [k * B, T, D] (k blocks of B rows):
integrated gradients evaluates several interpolation points at once, and `completeness_error`
the input and the baseline together, so a function that closes over per-example arrays (the
token ids) tiles them k times.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from jcaps.interpret import saliency

ScoreFn = Callable[[jax.Array], jax.Array]
GRADIENT_METHODS = ("gradient", "gradient_x_input", "integrated_gradients", "smoothgrad")
METHODS = GRADIENT_METHODS + ("occlusion", "random")


def _targets(target: int | jax.Array, embeddings: jax.Array) -> jax.Array:
    return jnp.broadcast_to(jnp.asarray(target, jnp.int32), embeddings.shape[:1])


def _masked(scores: jax.Array, mask: jax.Array) -> jax.Array:
    return jnp.where(mask, scores, 0.0).astype(jnp.float32)


def gradient(score_fn: ScoreFn, embeddings: jax.Array, target: int | jax.Array, mask: jax.Array) -> jax.Array:
    """||d f_c / d e_t||_2 per token.

    Args:
      score_fn: [B, T, D] -> [B, C]; examples independent.
      embeddings: e [B, T, D].
      target: c, one int or [B] ints.
      mask: [B, T] bool, True at real tokens.

    Returns:
      [B, T] non-negative scores, 0 at padding.
    """
    grads = saliency.input_gradients(score_fn, embeddings, _targets(target, embeddings), "logit")
    return _masked(jnp.linalg.norm(grads.astype(jnp.float32), axis=-1), mask)


def gradient_x_input(score_fn: ScoreFn, embeddings: jax.Array, target: int | jax.Array, mask: jax.Array) -> jax.Array:
    """sum_d e_td d f_c / d e_td per token (signed); the first-order share of f_c of each token."""
    grads = saliency.input_gradients(score_fn, embeddings, _targets(target, embeddings), "logit")
    return _masked(jnp.sum(grads * embeddings, axis=-1), mask)


def integrated_gradients(
    score_fn: ScoreFn,
    embeddings: jax.Array,
    target: int | jax.Array,
    mask: jax.Array,
    *,
    baseline: jax.Array | None = None,
    n_steps: int = 50,
    chunk_size: int | None = 10,
    linear_map: Callable[[jax.Array], jax.Array] | None = None,
) -> jax.Array:
    """Integrated gradients summed over each token's vector (signed).

    A model whose first layer is affine, f(e) = g(L(e)), can pass L as `linear_map` and g as
    `score_fn`: the straight path from e' to e maps to the straight path from L(e') to L(e), so
    the mean gradient along it is taken in z = L(e) and brought back once through L's transpose,
    grad_e f = L^T grad_z g. The attributions are the same; each of the K steps then costs the
    layers after L only.

    Args:
      score_fn, embeddings, target, mask: as `gradient` (`score_fn` of z when `linear_map`).
      baseline: e' broadcastable to e; zeros when None.
      n_steps: interpolation points (midpoint rule).
      chunk_size: the most points evaluated at once (memory ~ chunk_size * B); None: all.
      linear_map: L, an affine map of e [B, T, D] (examples independent), or None.

    Returns:
      [B, T] scores, 0 at padding; their sum over t approximates f_c(e) - f_c(e').
    """
    targets = _targets(target, embeddings)
    baseline = jnp.zeros_like(embeddings) if baseline is None else jnp.broadcast_to(baseline, embeddings.shape)
    baseline = baseline.astype(embeddings.dtype)
    if linear_map is None:
        attributions = saliency.integrated_gradients(
            score_fn, embeddings, targets, baseline=baseline, n_steps=n_steps, chunk_size=chunk_size, output="logit"
        )
    else:
        mean_gradient = saliency.mean_path_gradient(
            score_fn, linear_map(embeddings), targets, baseline=linear_map(baseline), n_steps=n_steps,
            chunk_size=chunk_size, output="logit",
        )
        _, transpose = jax.vjp(linear_map, embeddings)
        attributions = (embeddings - baseline) * transpose(mean_gradient)[0]
    return _masked(jnp.sum(attributions, axis=-1), mask)


def completeness_error(
    score_fn: ScoreFn,
    embeddings: jax.Array,
    target: int | jax.Array,
    attributions: jax.Array,
    *,
    baseline: jax.Array | None = None,
) -> jax.Array:
    """|sum_t a_t - (f_c(e) - f_c(e'))| / |f_c(e) - f_c(e')| per example [B]: how far integrated
    gradients' attributions a [B, T] are from accounting for the whole change of the output."""
    targets = _targets(target, embeddings)
    baseline = jnp.zeros_like(embeddings) if baseline is None else jnp.broadcast_to(baseline, embeddings.shape)
    both = score_fn(jnp.concatenate([embeddings, baseline.astype(embeddings.dtype)]))
    selected = jnp.take_along_axis(both.astype(jnp.float32), jnp.tile(targets, 2)[:, None], axis=1)[:, 0]
    change = selected[: embeddings.shape[0]] - selected[embeddings.shape[0]:]
    return jnp.abs(jnp.sum(attributions, axis=-1) - change) / jnp.maximum(jnp.abs(change), 1e-12)


def smoothgrad(
    score_fn: ScoreFn,
    embeddings: jax.Array,
    target: int | jax.Array,
    mask: jax.Array,
    key: jax.Array,
    *,
    n_samples: int = 25,
    stddev: float = 0.15,
) -> jax.Array:
    """The L2 norm over each token's vector of SmoothGrad's mean |gradient| (non-negative).
    `stddev` is a fraction of each example's range of vector values."""
    maps = saliency.smoothgrad(
        score_fn, embeddings, _targets(target, embeddings), key, n_samples=n_samples, stddev=stddev, output="logit"
    )
    return _masked(jnp.linalg.norm(maps.astype(jnp.float32), axis=-1), mask)


def occlusion(
    score_fn: ScoreFn,
    embeddings: jax.Array,
    target: int | jax.Array,
    mask: jax.Array,
    *,
    baseline: jax.Array | None = None,
) -> jax.Array:
    """f_c(e) - f_c(e with token t's vector replaced by the baseline's), for every t.

    The T occluded copies of the batch go through one `vmap`ped call of `score_fn` (memory
    ~ T * B examples). Signed: positive where removing the token lowers the output.

    Returns:
      [B, T] scores, 0 at padding.
    """
    targets = _targets(target, embeddings)
    baseline = jnp.zeros_like(embeddings) if baseline is None else jnp.broadcast_to(baseline, embeddings.shape)
    baseline = baseline.astype(embeddings.dtype)
    positions = jnp.arange(embeddings.shape[1])

    def selected(e: jax.Array) -> jax.Array:
        return jnp.take_along_axis(score_fn(e).astype(jnp.float32), targets[:, None], axis=1)[:, 0]

    def without(t: jax.Array) -> jax.Array:
        return selected(jnp.where((positions == t)[None, :, None], baseline, embeddings))

    occluded = jax.vmap(without)(positions)  # [T, B]
    return _masked(selected(embeddings)[:, None] - occluded.T, mask)


def random_scores(key: jax.Array, mask: jax.Array) -> jax.Array:
    """Uniform [0, 1) scores at the real tokens of mask [B, T]: a ranking that knows nothing."""
    return _masked(jax.random.uniform(key, mask.shape), mask)
