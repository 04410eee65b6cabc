"""How faithful a token ranking is: remove what it ranks highest and watch the prediction.

For an example with real tokens x, the explained output c and its probability p_c, and a
ranking of x's tokens (highest score first), let x_k be the top k % of x's real tokens
(ceil(k N / 100) of N, at least one), x \\ x_k the example with them removed and x_k the example
with everything else removed. A token is removed by replacing its id with PAD (the model then
masks it out) or, as a knob, UNK (it stays a position the model reads). Then, with
k in K = {1, 5, 10, 20, 50} (DeYoung et al. 2020, ERASER):

    comprehensiveness = (1/|K|) sum_k p_c(x) - p_c(x \\ x_k)    higher is more faithful
    sufficiency       = (1/|K|) sum_k p_c(x) - p_c(x_k)         lower is more faithful

both area-over-the-perturbation-curve (AOPC) averages, and over the fractions
f = 0, 0.1, ..., 1 of the real tokens (Petsiuk et al. 2018, RISE):

    deletion AUC  = trapezoid area under f -> p_c(x \\ x_f)       lower is more faithful
    insertion AUC = trapezoid area under f -> p_c(x_f)            higher is more faithful

with x_0 empty and x_1 = x. Ties in the scores are broken by position. Every variant of the
batch goes through one call of `probability_fn` (memory ~ (|K| + 2 * 11) * B examples;
`variant_batch_size` trades it for sequential calls). `bootstrap_interval` gives the 95 %
confidence interval of a mean over examples.

References:
  DeYoung, Jain, Rajani, Lehman, Xiong, Socher, Wallace. ERASER: A Benchmark to Evaluate
  Rationalized NLP Models. ACL 2020.
  Petsiuk, Das, Saenko. RISE: Randomized Input Sampling for Explanation of Black-box Models.
  BMVC 2018.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

AOPC_FRACTIONS = (0.01, 0.05, 0.10, 0.20, 0.50)
CURVE_POINTS = 11
METRICS = ("comprehensiveness", "sufficiency", "deletion_auc", "insertion_auc")

ProbabilityFn = Callable[[jax.Array], jax.Array]


def ranks(scores: jax.Array, mask: jax.Array) -> jax.Array:
    """The rank of each token by score [B, T] (0 = highest; ties by position; padding last)."""
    order = jnp.argsort(jnp.where(mask, -scores.astype(jnp.float32), jnp.inf), axis=-1, stable=True)
    return jnp.argsort(order, axis=-1, stable=True)


def top_fraction(rank: jax.Array, mask: jax.Array, fraction: jax.Array, at_least_one: bool) -> jax.Array:
    """[B, T] True at the top ceil(fraction * N) real tokens of each example (N its real count;
    at least one when `at_least_one` and N > 0)."""
    count = jnp.ceil(fraction * jnp.sum(mask, axis=-1, dtype=jnp.float32) - 1e-6).astype(rank.dtype)
    if at_least_one:
        count = jnp.maximum(count, 1)
    return (rank < count[:, None]) & mask


def faithfulness(
    probability_fn: ProbabilityFn,
    inputs: jax.Array,
    mask: jax.Array,
    target: int | jax.Array,
    scores: jax.Array,
    *,
    replacement: float = 0,
    fractions: tuple[float, ...] = AOPC_FRACTIONS,
    curve_points: int = CURVE_POINTS,
    variant_batch_size: int | None = None,
) -> dict[str, jax.Array]:
    """Comprehensiveness, sufficiency, deletion and insertion AUC of one ranking, per example.

    Args:
      probability_fn: inputs [N, T, ...] -> [N, C] probabilities; examples independent, any N.
      inputs: [B, T] int token ids of the batch, or any [B, T, ...] (a series: the values of
        each time step are replaced together).
      mask: [B, T] bool, True at the real positions (the only ones ranked and removed).
      target: the explained output c, one int or [B] ints.
      scores: [B, T] the ranking's scores (higher = more important).
      replacement: the id a removed token becomes (PAD 0, or UNK 1), or the value of a removed
        series step.
      fractions: the k of the AOPC averages, as fractions of the real tokens.
      curve_points: points of the deletion and insertion curves over [0, 1].
      variant_batch_size: perturbed copies of the batch per call (None: all in one call).

    Returns:
      {"comprehensiveness", "sufficiency", "deletion_auc", "insertion_auc", "probability"}:
      [B] float32 each (`probability` is p_c of the intact example).
    """
    targets = jnp.broadcast_to(jnp.asarray(target, jnp.int32), inputs.shape[:1])
    rank = ranks(scores, mask)
    aopc = jnp.asarray(fractions, jnp.float32)
    curve = jnp.linspace(0.0, 1.0, curve_points)
    top = jnp.concatenate(
        [
            jax.vmap(lambda f: top_fraction(rank, mask, f, at_least_one=True))(aopc),
            jax.vmap(lambda f: top_fraction(rank, mask, f, at_least_one=False))(curve),
        ]
    )  # [V, B, T]
    trailing = (1,) * (inputs.ndim - 2)
    removed = jnp.where(top.reshape(top.shape + trailing), replacement, inputs[None]).astype(inputs.dtype)
    dropped = (mask[None] & ~top).reshape(top.shape + trailing)
    kept = jnp.where(dropped, replacement, inputs[None]).astype(inputs.dtype)
    variants = jnp.concatenate([inputs[None], removed, kept])  # [1 + 2V, B, T, ...]

    def selected(batch_tokens: jax.Array) -> jax.Array:
        probabilities = probability_fn(batch_tokens).astype(jnp.float32)
        return jnp.take_along_axis(probabilities, targets[:, None], axis=1)[:, 0]

    p = jax.lax.map(selected, variants, batch_size=variant_batch_size)  # [1 + 2V, B]
    num_top = len(fractions) + curve_points
    full, p_removed, p_kept = p[0], p[1 : 1 + num_top], p[1 + num_top :]
    k = len(fractions)
    return {
        "comprehensiveness": jnp.mean(full[None] - p_removed[:k], axis=0),
        "sufficiency": jnp.mean(full[None] - p_kept[:k], axis=0),
        "deletion_auc": _trapezoid(p_removed[k:]),
        "insertion_auc": _trapezoid(p_kept[k:]),
        "probability": full,
    }


def _trapezoid(values: jax.Array) -> jax.Array:
    """Area under equally spaced values [P, B] over [0, 1]."""
    return (jnp.sum(values, axis=0) - 0.5 * (values[0] + values[-1])) / (values.shape[0] - 1)


def bootstrap_interval(values: np.ndarray, *, resamples: int = 1000, level: float = 0.95, seed: int = 0) -> list[float]:
    """The percentile bootstrap interval [low, high] of the mean of `values` [N]."""
    values = np.asarray(values, np.float64)
    if values.size == 0:
        return [float("nan"), float("nan")]
    draws = np.random.default_rng(seed).integers(0, values.size, size=(resamples, values.size))
    means = values[draws].mean(axis=1)
    tail = (1 - level) / 2
    return [float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))]
