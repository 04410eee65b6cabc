"""How faithful a ranking of positions is: erase what it ranks highest and watch the prediction.

    from jcaps import interpret

    metrics = interpret.faithfulness(f, x, target, scores, mask=mask, args=(tokens,))

For an example with real positions x, the explained output c and its probability p_c, and a
ranking of x's positions (highest score first), let x_k be the top k % of x's real positions
(ceil(k N / 100) of N, at least one), x \\ x_k the example with them erased and x_k the example
with every other real position erased. A position is erased by setting it to `baseline` (for
token ids: PAD, which the model masks out, or UNK, a position it still reads; for vectors or a
series: zeros); positions outside the mask keep their values. Then, with
k in K = {1, 5, 10, 20, 50} (DeYoung et al. 2020, ERASER):

    comprehensiveness = (1/|K|) sum_k p_c(x) - p_c(x \\ x_k)    higher is more faithful
    sufficiency       = (1/|K|) sum_k p_c(x) - p_c(x_k)         lower is more faithful

both area-over-the-perturbation-curve (AOPC) averages, and over the fractions
f = 0, 0.1, ..., 1 of the real tokens (Petsiuk et al. 2018, RISE):

    deletion AUC  = trapezoid area under f -> p_c(x \\ x_f)       lower is more faithful
    insertion AUC = trapezoid area under f -> p_c(x_f)            higher is more faithful

with x_0 empty and x_1 = x. Ties in the scores are broken by position. `f(x, *args) -> [B, C]`
is the model, as the attribution methods take it (`jcaps.interpret.METHODS`); `probabilities`
turns its outputs into p (softmax by default). Every erased copy of the batch goes through f as
a batch of B examples with the same args, as many copies a call as `max_rows` allows (None: all
(|K| + 2 * 11) of them in one call). `bootstrap_interval` gives the 95 % confidence interval of
a mean over examples, `summarise` the means and intervals a report shows.

References:
  DeYoung, Jain, Rajani, Lehman, Xiong, Socher, Wallace. ERASER: A Benchmark to Evaluate
  Rationalized NLP Models. ACL 2020.
  Petsiuk, Das, Saenko. RISE: Randomized Input Sampling for Explanation of Black-box Models.
  BMVC 2018.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jcaps.attribution import _arguments as arguments

AOPC_FRACTIONS = (0.01, 0.05, 0.10, 0.20, 0.50)
CURVE_POINTS = 11
METRICS = ("comprehensiveness", "sufficiency", "deletion_auc", "insertion_auc")


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
    f: Callable[..., jax.Array],
    x,
    target,
    scores,
    *,
    mask=None,
    args=(),
    baseline=0,
    probabilities: Callable[[jax.Array], jax.Array] | None = jax.nn.softmax,
    fractions: tuple[float, ...] = AOPC_FRACTIONS,
    curve_points: int = CURVE_POINTS,
    max_rows: int | None = None,
) -> dict[str, jax.Array]:
    """Comprehensiveness, sufficiency, deletion and insertion AUC of one ranking, per example
    (per example and output for [B, K] targets with [B, K, T] scores, as the methods give them).

    Args:
      f: the model, f(x, *args) -> [B, C] outputs; examples independent.
      x: [B, T] token ids, or any [B, T, ...] (vectors, a series: a position's values are erased
        together).
      target: the explained output c, one int or [B] ints, or [B, K] (K outputs an example).
      scores: [B, T] the ranking's scores (higher = more important), e.g. a method's output;
        [B, K, T] with [B, K] targets.
      mask: [B, T] bool, True at the real positions (the only ones ranked and erased); None: all.
      args: f's per-example side inputs, each [B, ...], passed with every erased copy.
      baseline: what an erased position becomes: a scalar (the PAD or UNK id, 0.0) or an array
        broadcastable to x.
      probabilities: [B, C] outputs -> [B, C] probabilities; None: f returns probabilities.
      fractions: the k of the AOPC averages, as fractions of the real positions.
      curve_points: points of the deletion and insertion curves over [0, 1].
      max_rows: the most rows one call of f sees (whole copies of the batch, at least one); None:
        every copy in one call.

    Returns:
      {"comprehensiveness", "sufficiency", "deletion_auc", "insertion_auc", "probability"}:
      [B] float32 each ([B, K] for K outputs; `probability` is p_c of the intact example); NaN
      for an example whose scores are NaN at a real position.
    """
    arguments.checked_model(f)
    x = jnp.asarray(x)
    if x.ndim < 2:
        raise ValueError(f"x: expected inputs [B, T, ...] (T positions), got shape {x.shape}")
    batch, length = x.shape[:2]
    if jnp.ndim(target) == 2:  # K rankings an example: each output's in turn
        target = arguments.checked_target(target, batch)
        scores = jnp.asarray(scores)
        if scores.shape != (batch, target.shape[1], length):
            raise ValueError(
                f"scores: expected [B, K, T] = [{batch}, {target.shape[1]}, {length}] (x's first two axes, K = "
                f"target's outputs an example), got shape {scores.shape}"
            )
        options = {
            "mask": mask,
            "args": args,
            "baseline": baseline,
            "probabilities": probabilities,
            "fractions": fractions,
            "curve_points": curve_points,
            "max_rows": max_rows,
        }
        each = [faithfulness(f, x, target[:, k], scores[:, k], **options) for k in range(target.shape[1])]
        return {name: jnp.stack([metrics[name] for metrics in each], axis=1) for name in each[0]}
    targets = jnp.broadcast_to(arguments.checked_target(target, batch).astype(jnp.int32), (batch,))
    mask = arguments.checked_mask(mask, batch, length)
    args = arguments.checked_args(args, batch)
    scores = jnp.asarray(scores)
    if scores.shape != (batch, length):
        raise ValueError(
            f"scores: expected [B, T] = [{batch}, {length}] (x's first two axes), got shape {scores.shape}"
        )
    baseline = arguments.checked_baseline(baseline, x)
    copies_per_call = None if max_rows is None else max(1, arguments.checked_count("max_rows", max_rows) // batch)
    rank = ranks(scores, mask)
    aopc = jnp.asarray(fractions, jnp.float32)
    curve = jnp.linspace(0.0, 1.0, curve_points)
    top = jnp.concatenate(
        [
            jax.vmap(lambda fraction: top_fraction(rank, mask, fraction, at_least_one=True))(aopc),
            jax.vmap(lambda fraction: top_fraction(rank, mask, fraction, at_least_one=False))(curve),
        ]
    )  # [V, B, T]
    trailing = (1,) * (x.ndim - 2)
    erased = jnp.where(top.reshape(top.shape + trailing), baseline[None], x[None])
    dropped = (mask[None] & ~top).reshape(top.shape + trailing)
    kept = jnp.where(dropped, baseline[None], x[None])
    copies = jnp.concatenate([x[None], erased, kept])  # [1 + 2V, B, T, ...]

    def selected(copy: jax.Array) -> jax.Array:
        outputs = f(copy, *args)
        p = (outputs if probabilities is None else probabilities(outputs)).astype(jnp.float32)
        return jnp.take_along_axis(p, targets[:, None], axis=1)[:, 0]

    p = jax.lax.map(selected, copies, batch_size=copies_per_call)  # [1 + 2V, B]
    num_top = len(fractions) + curve_points
    full, p_erased, p_kept = p[0], p[1 : 1 + num_top], p[1 + num_top :]
    k = len(fractions)
    # A ranking with a NaN score at a real position ranks nothing: its metrics are NaN, not those
    # of the order the NaN happened to sort into.
    unranked = jnp.any(jnp.isnan(scores) & mask, axis=-1)
    metrics = {
        "comprehensiveness": jnp.mean(full[None] - p_erased[:k], axis=0),
        "sufficiency": jnp.mean(full[None] - p_kept[:k], axis=0),
        "deletion_auc": _trapezoid(p_erased[k:]),
        "insertion_auc": _trapezoid(p_kept[k:]),
    }
    return {**{name: jnp.where(unranked, jnp.nan, value) for name, value in metrics.items()}, "probability": full}


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


def summarise(metrics: Mapping[str, Any], *, seed: int = 0) -> dict:
    """{metric: mean over examples, "ci95": {metric: [low, high]}} of `faithfulness`'s per-example
    metrics ([B], or [B, K]: every explained output counts once; any extra key, such as
    "probability", left out); what the reports tabulate."""
    arrays = {metric: np.asarray(metrics[metric], np.float64).reshape(-1) for metric in METRICS}
    return {
        **{metric: float(np.mean(v)) if v.size else float("nan") for metric, v in arrays.items()},
        "ci95": {metric: bootstrap_interval(v, seed=seed) for metric, v in arrays.items()},
    }
