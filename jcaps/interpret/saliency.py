"""Gradient attributions of a classifier's inputs, and the box metrics that score them, docs/models.md §3.

Attributions, for a batch x [B, ...] and a class c per example:
  * Saliency: |d out_c / d x|, with out the softmax probability (the input-cell attention paper's
    choice) or the logit.
  * Integrated gradients: (x - x') * mean_k d out_c / d x at x' + a_k (x - x'), the path integral
    from the baseline x' (zeros by default) to x by the midpoint Riemann rule, a_k = (k + 1/2) / K.
    Signed; the attributions of an example sum to about out_c(x) - out_c(x') (completeness).
  * SmoothGrad: the mean of the saliency over noisy copies x + N(0, sigma^2), with sigma a
    fraction of each example's value range max(x) - min(x).

The attribution functions are pure and work under `jit` with `score_fn` (and the keyword
options) static. `score_fn(x) -> [B, C]` logits must treat examples independently (no batch
norm in training mode, no batch-wide statistics): then the gradient of the sum over the batch of
the selected outputs is every example's own gradient, so one backward pass serves the whole
batch instead of one per example (`vmap` of `grad`).

Box metrics, on the synthetic box data whose class signal lives inside known boxes: the mask R
is 1 inside the boxes and S is |saliency| min-max scaled to [0, 1] per example.
  * Weighted Jaccard: sum min(R, S) / sum max(R, S); 1 when S = R, higher is better.
  * Euclidean distance: ||R - S||_2 / ||R||_2; 0 when S = R, 1 when S = 0, lower is better.
  * ROC-AUC of S as a score for R (the Mann-Whitney U statistic, ties counted as 1/2).
They are evaluation code, in NumPy, vectorised over the batch.

References:
  Simonyan, Vedaldi, Zisserman. Deep Inside Convolutional Networks: Visualising Image
  Classification Models and Saliency Maps. ICLR workshop 2014.
  Sundararajan, Taly, Yan. Axiomatic Attribution for Deep Networks. ICML 2017.
  Smilkov, Thorat, Kim, Viegas, Wattenberg. SmoothGrad: removing noise by adding noise. 2017.
  Ismail, Gunady, Pessoa, Corrada Bravo, Feizi. Input-Cell Attention Reduces Vanishing
  Saliency of Recurrent Neural Networks. NeurIPS 2019 (Sec. 5, the box data and metrics).
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

ScoreFn = Callable[[jax.Array], jax.Array]
OUTPUTS = ("probability", "logit")

# ---------------------------------------------------------------------------------------------
# Attributions
# ---------------------------------------------------------------------------------------------


def _check_output(output: str) -> None:
    if output not in OUTPUTS:
        raise ValueError(f"output must be one of {OUTPUTS}, got {output!r}.")


def _per_example_targets(target: int | jax.Array, batch_size: int) -> jax.Array:
    """[B] int32 classes from one class for every example or one per example."""
    return jnp.broadcast_to(jnp.asarray(target, dtype=jnp.int32), (batch_size,))


def input_gradients(score_fn: ScoreFn, x: jax.Array, targets: jax.Array, output: str) -> jax.Array:
    """d out_c / d x of every example in one backward pass.

    Args:
      score_fn: [B, ...] -> [B, C] logits, examples independent.
      x: [B, ...] float inputs.
      targets: [B] int classes c.
      output: "probability" (softmax of the logits) or "logit".

    Returns:
      [B, ...] signed gradients, shaped like x.
    """

    def selected_output_sum(inputs: jax.Array) -> jax.Array:
        logits = score_fn(inputs)
        values = jax.nn.softmax(logits, axis=-1) if output == "probability" else logits
        return jnp.sum(jnp.take_along_axis(values, targets[:, None], axis=1))

    return jax.grad(selected_output_sum)(x)


def saliency(score_fn: ScoreFn, x: jax.Array, target: int | jax.Array, *, output: str = "probability") -> jax.Array:
    """Vanilla saliency |d out_c / d x| (Simonyan et al. 2014).

    Args:
      score_fn: [B, ...] -> [B, C] logits; must treat examples independently.
      x: [B, ...] float inputs.
      target: the class c, an int for every example or an int array [B].
      output: differentiate the softmax probability ("probability") or the logit ("logit").

    Returns:
      [B, ...] non-negative saliency, shaped like x.
    """
    _check_output(output)
    return jnp.abs(input_gradients(score_fn, x, _per_example_targets(target, x.shape[0]), output))


def integrated_gradients(
    score_fn: ScoreFn,
    x: jax.Array,
    target: int | jax.Array,
    *,
    baseline: jax.Array | None = None,
    n_steps: int = 50,
    chunk_size: int | None = None,
    output: str = "logit",
) -> jax.Array:
    """Integrated gradients (Sundararajan et al. 2017) by the midpoint Riemann rule.

        IG(x) = (x - x') * (1/K) sum_{k<K} g(x' + a_k (x - x')),   a_k = (k + 1/2) / K,

    with g = d out_c / d x and K = `n_steps`. The K interpolation points of the batch are fed to
    `score_fn` together, K * B examples at once; with `chunk_size` they go in chunks of at most
    `chunk_size` steps under a `lax.scan`, so memory grows with chunk_size * B instead. Chunks
    are equal-sized, ceil(K / n_chunks) steps each; when that does not divide K, the last chunk
    repeats the final step and masks the copies out, so the result matches the unchunked one up
    to summation order.

    Args:
      score_fn: [B, ...] -> [B, C] logits; must treat examples independently and accept any
        batch size: it is called on [S * B, ...] stacks of S steps, step-major (row s * B + b
        is step s of example b), so per-example side inputs such as a mask tile S times.
      x: [B, ...] float inputs.
      target: the class c, an int for every example or an int array [B].
      baseline: x', broadcastable to x; zeros when None.
      n_steps: K, the number of interpolation points.
      chunk_size: the most steps evaluated at once; None evaluates all K together.
      output: differentiate the logit ("logit") or the softmax probability ("probability").

    Returns:
      [B, ...] signed attributions, shaped like x.
    """
    baseline = jnp.zeros_like(x) if baseline is None else jnp.broadcast_to(baseline, x.shape).astype(x.dtype)
    mean_gradient = mean_path_gradient(
        score_fn, x, target, baseline=baseline, n_steps=n_steps, chunk_size=chunk_size, output=output
    )
    return (x - baseline) * mean_gradient


def mean_path_gradient(
    score_fn: ScoreFn,
    x: jax.Array,
    target: int | jax.Array,
    *,
    baseline: jax.Array | None = None,
    n_steps: int = 50,
    chunk_size: int | None = None,
    output: str = "logit",
) -> jax.Array:
    """(1/K) sum_{k<K} g(x' + a_k (x - x')), the mean gradient along the straight path that
    `integrated_gradients` multiplies by x - x' (same arguments, same chunking).

    Returns:
      [B, ...] signed mean gradients, shaped like x.
    """
    _check_output(output)
    if n_steps < 1:
        raise ValueError(f"n_steps must be positive, got {n_steps}.")
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be positive or None, got {chunk_size}.")
    baseline = jnp.zeros_like(x) if baseline is None else jnp.broadcast_to(baseline, x.shape).astype(x.dtype)
    difference = x - baseline
    targets = _per_example_targets(target, x.shape[0])

    n_chunks = 1 if chunk_size is None else -(-n_steps // chunk_size)
    steps_per_chunk = -(-n_steps // n_chunks)
    step_index = jnp.arange(n_chunks * steps_per_chunk).reshape(n_chunks, steps_per_chunk)
    is_step = step_index < n_steps
    # Padded steps reuse the last real alpha, not an arbitrary one: their gradient is then finite
    # whenever the real ones are, and masking them out cannot turn an inf into a NaN.
    alphas = ((jnp.minimum(step_index, n_steps - 1).astype(jnp.float32) + 0.5) / n_steps).astype(x.dtype)
    point_shape = (steps_per_chunk,) + (1,) * x.ndim
    chunk_targets = jnp.tile(targets, steps_per_chunk)

    def add_chunk(gradient_sum: jax.Array, chunk: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, None]:
        chunk_alphas, chunk_is_step = chunk
        points = baseline[None] + chunk_alphas.reshape(point_shape) * difference[None]  # [S, B, ...]
        gradients = input_gradients(score_fn, points.reshape((-1,) + x.shape[1:]), chunk_targets, output)
        gradients = jnp.where(chunk_is_step.reshape(point_shape), gradients.reshape(points.shape), 0)
        return gradient_sum + jnp.sum(gradients, axis=0), None

    gradient_sum, _ = jax.lax.scan(add_chunk, jnp.zeros_like(x), (alphas, is_step))
    return gradient_sum / n_steps


def smoothgrad(
    score_fn: ScoreFn,
    x: jax.Array,
    target: int | jax.Array,
    key: jax.Array,
    *,
    n_samples: int = 25,
    stddev: float = 0.15,
    output: str = "probability",
) -> jax.Array:
    """SmoothGrad (Smilkov et al. 2017): saliency averaged over noisy copies of the input.

        SG(x) = (1/M) sum_{m<M} |g(x + eps_m)|,   eps_m ~ N(0, (stddev * (max(x) - min(x)))^2),

    with g = d out_c / d x, M = `n_samples`, and max / min taken over each example's own values,
    so `stddev` is a fraction of the example's value range as in the paper. The samples run one
    after another under a `lax.scan`: memory is that of one saliency pass.

    Args:
      score_fn: [B, ...] -> [B, C] logits; must treat examples independently.
      x: [B, ...] float inputs.
      target: the class c, an int for every example or an int array [B].
      key: PRNG key for the noise.
      n_samples: M, the number of noisy copies.
      stddev: noise standard deviation as a fraction of each example's value range.
      output: differentiate the softmax probability ("probability") or the logit ("logit").

    Returns:
      [B, ...] non-negative smoothed saliency, shaped like x.
    """
    _check_output(output)
    if n_samples < 1:
        raise ValueError(f"n_samples must be positive, got {n_samples}.")
    targets = _per_example_targets(target, x.shape[0])
    flat = x.reshape(x.shape[0], -1)
    value_range = jnp.max(flat, axis=1) - jnp.min(flat, axis=1)
    noise_scale = (stddev * value_range).reshape((x.shape[0],) + (1,) * (x.ndim - 1))

    def add_sample(saliency_sum: jax.Array, sample_key: jax.Array) -> tuple[jax.Array, None]:
        noisy = x + noise_scale * jax.random.normal(sample_key, x.shape, x.dtype)
        return saliency_sum + jnp.abs(input_gradients(score_fn, noisy, targets, output)), None

    saliency_sum, _ = jax.lax.scan(add_sample, jnp.zeros_like(x), jax.random.split(key, n_samples))
    return saliency_sum / n_samples


# ---------------------------------------------------------------------------------------------
# Box metrics (Ismail et al. 2019)
# ---------------------------------------------------------------------------------------------


def _flat_scaled_maps_and_boxes(maps: np.ndarray, boxes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Min-max scaled |maps| S and box masks R, flattened per example.

    Args:
      maps: [B, T, N] saliency maps (any sign).
      boxes: [T, N] or [B, T, N], 1 inside the boxes and 0 elsewhere.

    Returns:
      scaled: [B, T * N] float64 in [0, 1]; all zeros for a constant |map|.
      boxes: [B, T * N] float64.
    """
    magnitudes = np.abs(np.asarray(maps, dtype=np.float64))
    boxes = np.asarray(boxes, dtype=np.float64)
    if boxes.shape not in (magnitudes.shape, magnitudes.shape[1:]):
        raise ValueError(f"boxes must be shaped {magnitudes.shape[1:]} or {magnitudes.shape}, got {boxes.shape}.")
    boxes = np.broadcast_to(boxes, magnitudes.shape).reshape(magnitudes.shape[0], -1)
    magnitudes = magnitudes.reshape(boxes.shape)
    if not np.all(boxes.any(axis=1)):
        raise ValueError("every example needs a non-empty box mask.")
    low = magnitudes.min(axis=1, keepdims=True)
    value_range = magnitudes.max(axis=1, keepdims=True) - low
    # A constant map carries no location: it scales to zeros rather than 0 / 0.
    scaled = np.where(value_range > 0, (magnitudes - low) / np.where(value_range > 0, value_range, 1), 0.0)
    return scaled, boxes


def weighted_jaccard(maps: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """Weighted Jaccard similarity sum min(R, S) / sum max(R, S) per example.

    Args:
      maps: [B, T, N] saliency maps; S is |map| min-max scaled per example.
      boxes: R, [T, N] or [B, T, N], 1 inside the boxes and 0 elsewhere; never all zero.

    Returns:
      [B] float64 in [0, 1]; 1 when S = R.
    """
    scaled, boxes = _flat_scaled_maps_and_boxes(maps, boxes)
    return np.minimum(boxes, scaled).sum(axis=1) / np.maximum(boxes, scaled).sum(axis=1)


def euclidean_distance(maps: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """Relative Euclidean distance ||R - S||_2 / ||R||_2 per example.

    Args:
      maps: [B, T, N] saliency maps; S is |map| min-max scaled per example.
      boxes: R, [T, N] or [B, T, N], 1 inside the boxes and 0 elsewhere; never all zero.

    Returns:
      [B] float64, non-negative; 0 when S = R and 1 when S = 0.
    """
    scaled, boxes = _flat_scaled_maps_and_boxes(maps, boxes)
    return np.linalg.norm(boxes - scaled, axis=1) / np.linalg.norm(boxes, axis=1)


def _average_ranks(scores: np.ndarray) -> np.ndarray:
    """1-based ranks of each row's entries, tied entries sharing the mean of their ranks.

    Args:
      scores: [B, D].

    Returns:
      [B, D] float64 ranks.
    """
    order = np.argsort(scores, axis=1, kind="stable")
    ordered = np.take_along_axis(scores, order, axis=1)
    position = np.broadcast_to(np.arange(scores.shape[1]), scores.shape)
    differs_from_next = ordered[:, 1:] != ordered[:, :-1]
    first_of_group = np.concatenate([np.ones_like(differs_from_next[:, :1]), differs_from_next], axis=1)
    last_of_group = np.concatenate([differs_from_next, np.ones_like(differs_from_next[:, :1])], axis=1)
    # The first (last) position of each sorted entry's tie group: a running max from the left
    # over group starts, a running min from the right over group ends.
    group_start = np.maximum.accumulate(np.where(first_of_group, position, 0), axis=1)
    group_end = np.minimum.accumulate(np.where(last_of_group, position, scores.shape[1])[:, ::-1], axis=1)[:, ::-1]
    ranks = np.empty(scores.shape, dtype=np.float64)
    np.put_along_axis(ranks, order, (group_start + group_end) / 2 + 1, axis=1)
    return ranks


def roc_auc(maps: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """ROC-AUC of S as a score for the cells inside the boxes, per example.

    The Mann-Whitney form: the probability that a random cell inside the boxes scores above a
    random cell outside, ties counting 1/2, from the average ranks of the scores (O(D log D) for
    D = T * N cells, where pairwise comparison would take D^2).

    Args:
      maps: [B, T, N] saliency maps; S is |map| min-max scaled per example.
      boxes: R, [T, N] or [B, T, N], 1 (nonzero) inside the boxes and 0 elsewhere; every example
        needs cells both inside and outside.

    Returns:
      [B] float64 in [0, 1]; 1 when every box cell outscores every other cell, 0.5 for a
      constant map.
    """
    scaled, boxes = _flat_scaled_maps_and_boxes(maps, boxes)
    inside = boxes != 0
    n_inside = inside.sum(axis=1)
    n_outside = inside.shape[1] - n_inside
    if not np.all(n_outside > 0):
        raise ValueError("roc_auc needs cells outside the boxes in every example.")
    rank_sum_inside = np.where(inside, _average_ranks(scaled), 0.0).sum(axis=1)
    u_statistic = rank_sum_inside - n_inside * (n_inside + 1) / 2
    return u_statistic / (n_inside * n_outside)


def box_metrics(maps: np.ndarray, boxes: np.ndarray) -> dict[str, float]:
    """The three box metrics averaged over the batch.

    Args:
      maps: [B, T, N] saliency maps.
      boxes: [T, N] or [B, T, N] box masks, 1 inside the boxes.

    Returns:
      {"wjac": weighted Jaccard, "euclidean": relative Euclidean distance, "auc": ROC-AUC}.
    """
    return {
        "wjac": float(np.mean(weighted_jaccard(maps, boxes))),
        "euclidean": float(np.mean(euclidean_distance(maps, boxes))),
        "auc": float(np.mean(roc_auc(maps, boxes))),
    }
