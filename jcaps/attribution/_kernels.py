"""The kernels of `jcaps.attribution.methods`: private, called only by the public methods there,
which check the arguments, own every default and repeat f's side inputs for it. A kernel's
options are keyword-only and have no defaults: its caller states each one.

Every kernel takes the model f, a batched function of the inputs alone, `f(x) -> [R, C]`, the
inputs x [R, ...] (R rows: a batch, or K copies of it for K targets each) and the explained
output of every row, `targets` (one int for all, or [R]). The output explained is f's raw score
for it: what f returns (a logit, a capsule length, a log-probability). f must treat the rows
independently (no batch-wide statistics): the gradient of the sum over the rows of the selected
outputs is then every row's own gradient, one backward pass for all of them instead of one a row
(`input_gradients`). f must also score any whole number k of copies of the rows stacked as
[k * R, ...] (k blocks of R rows, copy-major), which the methods' f does by repeating its side
inputs k times. `max_rows` bounds the rows one call of f scores: a kernel that evaluates many
copies of the rows (integration points, occluded inputs, coalitions) sends max(1, max_rows // R)
of them a call (`_copies`), in the fewest calls, as equal as they can be; the results do not
depend on it.

On x [R, T, ...], T positions, with the mask [R, T] of the real positions where a kernel takes
one:
  * input_gradients:      d f_c / d x, shaped like x: the gradient of Simonyan et al. 2014, which
                          the methods reduce to a position's norm or its sum of x * d f_c / d x
                          (gradient x input; Shrikumar et al. 2016)
  * integrated_gradients: (x - x') * mean_k d f_c / d x at x' + a_k (x - x'), the path integral
                          from the baseline x' to x by the midpoint Riemann rule, a_k = (k + 1/2)
                          / K, shaped like x; signed, a row's attributions sum to about f_c(x) -
                          f_c(x') (completeness; `completeness_error`) (Sundararajan et al. 2017)
  * smoothgrad:           the mean of |d f_c / d x| over noisy copies x + N(0, sigma^2), sigma a
                          fraction of each row's value range max(x) - min(x), shaped like x
                          (Smilkov et al. 2017)
  * occlusion:            f_c(x) - f_c(x with x_t := x'_t) for every position t, [R, T]
                          (leave one position out; Zeiler & Fergus 2014)
  * kernel_shap:          Shapley values estimated by KernelSHAP: coalitions z of the real
                          positions (the others at the baseline), the sizes the budget covers
                          enumerated and the rest sampled in complementary pairs by stratum
                          (`shapley_kernel_design`), then the weighted least squares fit of
                          f_c(z) - f_c(x') by z^T phi under the efficiency constraint sum_t phi_t
                          = f_c(x) - f_c(x') (Lundberg & Lee 2017; the closed form of Covert & Lee
                          2021)
  * shapley_sampling:     Shapley values estimated from antithetic permutations (each drawn order
                          and its reverse): phi_t = the mean over orders of the change of f_c
                          when t joins the positions before it (Strumbelj & Kononenko 2010;
                          Mitchell et al. 2022); efficiency holds for each order
  * lime:                 LIME's local linear surrogate: coalitions keeping all but a uniform
                          number 1..M of the M real positions, weighted by LIME's exponential
                          kernel of their cosine distance to the input, fitted by ridge
                          regression with an intercept; the coefficients (Ribeiro et al. 2016)
  * random_scores:        uniform random scores at the real positions: the baseline ranking that
                          every faithfulness score is compared with
The three sampling methods treat each real position as a player that is present (its values) or
absent (the baseline's), score their coalitions with `coalition_values`, and take their sample
count and a key. With `groups` [R, T] (each position's group, 0 <= g < T, or -1: no player),
occlusion and the sampling methods make each group one player instead (`player_mask`,
`positions_of`): their scores are then [R, T] over the group ids, position g holding group g's.

Every random draw of a row comes from that row's own key: `key` is one PRNG key, split into one
a row, or one key a row ([R] keys), and then a row's draws, and so its scores, do not depend on
the other rows or on their order (`row_keys`).

A model whose first layer is affine, f = g(L(x)), can be given as g (as f) and L (`linear_map`,
rows independent): integrated gradients integrates behind L, occlusion and the sampling methods
score their inputs behind it (`prefix_radius`: how far L reaches, as `occlusion` says).

The kernels are jit-compatible with f, `linear_map` and the other options static.

References:
  Simonyan, Vedaldi, Zisserman. Deep Inside Convolutional Networks: Visualising Image
  Classification Models and Saliency Maps. ICLR workshop 2014.
  Sundararajan, Taly, Yan. Axiomatic Attribution for Deep Networks. ICML 2017.
  Smilkov, Thorat, Kim, Viegas, Wattenberg. SmoothGrad: removing noise by adding noise. 2017.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

Model = Callable[[jax.Array], jax.Array]
LinearMap = Callable[[jax.Array], jax.Array]

# The ridge on the diagonal of KernelSHAP's regression (`constrained_shapley_regression`).
_SHAPLEY_RIDGE = 1e-6


def _targets(targets: int | jax.Array, x: jax.Array) -> jax.Array:
    """[R] int32 outputs from one output for every row or one a row."""
    return jnp.broadcast_to(jnp.asarray(targets, jnp.int32), x.shape[:1])


def _baseline(x: jax.Array, baseline: jax.Array) -> jax.Array:
    """x' broadcast to x's shape and dtype."""
    return jnp.broadcast_to(baseline, x.shape).astype(x.dtype)


def _copies(max_rows: int, x: jax.Array) -> int:
    """How many copies of the R rows of x [R, ...] one call of f scores: as many as `max_rows`
    rows hold, at least one."""
    return max(1, max_rows // x.shape[0])


def _masked(scores: jax.Array, mask: jax.Array) -> jax.Array:
    return jnp.where(mask, scores, 0.0).astype(jnp.float32)


def player_mask(mask: jax.Array, groups: jax.Array | None) -> jax.Array:
    """[R, T] bool, the players: the real positions, or with `groups` [R, T] (each position's
    group id, -1 for none) the ids g < T that some real position has."""
    if groups is None:
        return mask
    member = mask & (groups >= 0)
    return jnp.any(member[:, :, None] & (groups[:, :, None] == jnp.arange(mask.shape[1])[None, None]), axis=1)


def positions_of(coalitions: jax.Array, mask: jax.Array, groups: jax.Array | None) -> jax.Array:
    """Coalitions of players [..., R, T] as coalitions of positions [..., R, T]: a position is in
    when its group is (False where it has no group or is padding); the identity without groups."""
    if groups is None:
        return coalitions
    index = jnp.broadcast_to(jnp.clip(groups, 0, mask.shape[1] - 1), coalitions.shape)
    playing = jnp.broadcast_to(mask & (groups >= 0), coalitions.shape)
    return jnp.take_along_axis(coalitions, index, axis=-1) & playing


# ---------------------------------------------------------------------------------------------
# Gradient methods
# ---------------------------------------------------------------------------------------------


def input_gradients(f: Model, x: jax.Array, targets: int | jax.Array) -> jax.Array:
    """d f_c / d x of every row in one backward pass.

    Args:
      f: [R, ...] -> [R, C] scores, rows independent.
      x: [R, ...] float inputs.
      targets: the outputs c, one int or [R] ints.

    Returns:
      [R, ...] signed gradients, shaped like x.
    """
    targets = _targets(targets, x)

    def selected_output_sum(inputs: jax.Array) -> jax.Array:
        return jnp.sum(jnp.take_along_axis(f(inputs), targets[:, None], axis=1))

    return jax.grad(selected_output_sum)(x)


def integrated_gradients(
    f: Model,
    x: jax.Array,
    targets: int | jax.Array,
    *,
    baseline: jax.Array,
    n_steps: int,
    rule: str,
    max_rows: int,
    linear_map: LinearMap | None,
) -> jax.Array:
    """Integrated gradients (Sundararajan et al. 2017) by a K-point quadrature of the path.

        IG(x) = (x - x') * sum_{k<K} w_k g(x' + a_k (x - x')),

    with g = d f_c / d x and K = `n_steps` (`_mean_path_gradient`): the midpoint Riemann rule,
    a_k = (k + 1/2) / K and w_k = 1 / K, or Gauss-Legendre's nodes and weights on [0, 1]
    (`quadrature`).

    A model whose first layer is affine, f(x) = g(L(x)), can pass L as `linear_map` and g as
    `f`: the straight path from x' to x maps to the straight path from L(x') to L(x), so the mean
    gradient along it is taken in z = L(x) and brought back once through L's transpose, grad_x f
    = L^T grad_z g. The attributions are the same; each of the K steps then costs the layers
    after L only.

    Args:
      f: [R, ...] -> [R, C] scores (of z when `linear_map`), rows independent; called on [S * R,
        ...] stacks of S steps, step-major (row s * R + r is step s of row r).
      x: [R, ...] float inputs.
      targets: the outputs c, one int or [R] ints.
      baseline: x', broadcastable to x.
      n_steps: K, the number of interpolation points.
      rule: "midpoint" or "gausslegendre".
      max_rows: the most rows one call of f scores: min(K, max(1, max_rows // R)) steps a call.
      linear_map: L, an affine map of x (rows independent), or None.

    Returns:
      [R, ...] signed attributions shaped like x; a row's sum approximates f_c(x) - f_c(x').
    """
    baseline = _baseline(x, baseline)
    steps_a_call = min(n_steps, _copies(max_rows, x))
    if linear_map is None:
        mean_gradient = _mean_path_gradient(f, x, targets, baseline, n_steps, rule, steps_a_call)
    else:
        mean_in_z = _mean_path_gradient(f, linear_map(x), targets, linear_map(baseline), n_steps, rule, steps_a_call)
        _, transpose = jax.vjp(linear_map, x)
        mean_gradient = transpose(mean_in_z)[0]
    return (x - baseline) * mean_gradient


def quadrature(n_steps: int, rule: str) -> tuple[np.ndarray, np.ndarray, float]:
    """(a [K], w [K], d): the points of the path from 0 to 1 and their weights, the weighted sum
    to be divided by d. Midpoint: a_k = (k + 1/2) / K, w_k = 1, d = K (the sum, then one division,
    as the midpoint rule has always been computed here). Gauss-Legendre: its K nodes and weights
    mapped from [-1, 1] to [0, 1], d = 1; exact for polynomials of degree 2K - 1 along the path."""
    if rule == "gausslegendre":
        nodes, weights = np.polynomial.legendre.leggauss(n_steps)
        return (nodes + 1) / 2, weights / 2, 1.0
    return (np.arange(n_steps) + 0.5) / n_steps, np.ones(n_steps), float(n_steps)


def _mean_path_gradient(
    f: Model, x: jax.Array, targets: int | jax.Array, baseline: jax.Array, n_steps: int, rule: str, steps_a_call: int
) -> jax.Array:
    """sum_{k<K} w_k g(x' + a_k (x - x')), the mean gradient along the straight path that
    `integrated_gradients` multiplies by x - x' (`quadrature`), in the fewest calls of at most
    `steps_a_call` steps each. [R, ...] signed mean gradients, shaped like x."""
    baseline = _baseline(x, baseline)
    difference = x - baseline
    targets = _targets(targets, x)

    n_chunks = -(-n_steps // steps_a_call)
    steps_per_chunk = -(-n_steps // n_chunks)
    step_index = jnp.arange(n_chunks * steps_per_chunk).reshape(n_chunks, steps_per_chunk)
    is_step = step_index < n_steps
    nodes, weights, divisor = quadrature(n_steps, rule)
    # Padded steps reuse the last real alpha, not an arbitrary one: their gradient is then finite
    # whenever the real ones are, and masking them out cannot turn an inf into a NaN.
    last = jnp.minimum(step_index, n_steps - 1)
    if rule == "gausslegendre":
        alphas = jnp.asarray(nodes, jnp.float32)[last].astype(x.dtype)
    else:  # computed as it always was, so that the midpoint scores stay bit for bit the same
        alphas = ((last.astype(jnp.float32) + 0.5) / n_steps).astype(x.dtype)
    step_weights = jnp.asarray(weights, jnp.float32)[last].astype(x.dtype)  # 1 for the midpoint rule: exact
    point_shape = (steps_per_chunk,) + (1,) * x.ndim
    chunk_targets = jnp.tile(targets, steps_per_chunk)

    def add_chunk(gradient_sum: jax.Array, chunk) -> tuple[jax.Array, None]:
        chunk_alphas, chunk_is_step, chunk_weights = chunk
        points = baseline[None] + chunk_alphas.reshape(point_shape) * difference[None]  # [S, R, ...]
        gradients = input_gradients(f, points.reshape((-1,) + x.shape[1:]), chunk_targets)
        gradients = jnp.where(chunk_is_step.reshape(point_shape), gradients.reshape(points.shape), 0)
        return gradient_sum + jnp.sum(gradients * chunk_weights.reshape(point_shape), axis=0), None

    gradient_sum, _ = jax.lax.scan(add_chunk, jnp.zeros_like(x), (alphas, is_step, step_weights))
    return gradient_sum / divisor


def completeness_error(
    f: Model, x: jax.Array, targets: int | jax.Array, attributions: jax.Array, *, baseline: jax.Array
) -> jax.Array:
    """|sum_t a_t - (f_c(x) - f_c(x'))| / |f_c(x) - f_c(x')| per row [R]: how far integrated
    gradients' attributions a [R, T] are from accounting for the whole change of the output.
    f scores x and x' in one call of 2 R rows."""
    targets = _targets(targets, x)
    both = f(jnp.concatenate([x, _baseline(x, baseline)]))
    selected = jnp.take_along_axis(both.astype(jnp.float32), jnp.tile(targets, 2)[:, None], axis=1)[:, 0]
    change = selected[: x.shape[0]] - selected[x.shape[0] :]
    return jnp.abs(jnp.sum(attributions, axis=-1) - change) / jnp.maximum(jnp.abs(change), 1e-12)


def smoothgrad(
    f: Model, x: jax.Array, targets: int | jax.Array, key: jax.Array, *, n_samples: int, stddev: float
) -> jax.Array:
    """SmoothGrad (Smilkov et al. 2017): |d f_c / d x| averaged over noisy copies of the input.

        SG(x) = (1/M) sum_{m<M} |g(x + eps_m)|,   eps_m ~ N(0, (stddev * (max(x) - min(x)))^2),

    with g = d f_c / d x, M = `n_samples`, and max / min taken over each row's own values, so
    `stddev` is a fraction of the row's value range as in the paper. The samples run one after
    another under a `lax.scan`: memory is that of one gradient pass.

    Args:
      f: [R, ...] -> [R, C] scores, rows independent.
      x: [R, ...] float inputs.
      targets: the outputs c, one int or [R] ints.
      key: a PRNG key for the noise, or [R] keys, one a row (`row_keys`).
      n_samples: M, the number of noisy copies.
      stddev: noise standard deviation as a fraction of each row's value range.

    Returns:
      [R, ...] non-negative smoothed gradients, shaped like x.
    """
    targets = _targets(targets, x)
    flat = x.reshape(x.shape[0], -1)
    value_range = jnp.max(flat, axis=1) - jnp.min(flat, axis=1)
    noise_scale = (stddev * value_range).reshape((x.shape[0],) + (1,) * (x.ndim - 1))

    def add_sample(gradient_sum: jax.Array, sample_keys: jax.Array) -> tuple[jax.Array, None]:
        noise = jax.vmap(lambda k: jax.random.normal(k, x.shape[1:], x.dtype))(sample_keys)
        noisy = x + noise_scale * noise
        return gradient_sum + jnp.abs(input_gradients(f, noisy, targets)), None

    sample_keys = jax.vmap(lambda k: jax.random.split(k, n_samples))(row_keys(key, x.shape[0]))  # [R, M]
    gradient_sum, _ = jax.lax.scan(add_sample, jnp.zeros_like(x), jnp.swapaxes(sample_keys, 0, 1))
    return gradient_sum / n_samples


def expected_gradients(
    f: Model,
    x: jax.Array,
    targets: int | jax.Array,
    key: jax.Array,
    *,
    references: jax.Array,
    mask: jax.Array,
    n_samples: int,
    max_rows: int,
) -> jax.Array:
    """Expected gradients (Erion et al. 2021; GradientSHAP, Lundberg & Lee 2017): integrated
    gradients averaged over baselines drawn from a distribution, one path point a sample.

        EG(x) = (1/M) sum_{m<M} (x - x'_m) * g(x'_m + a_m (x - x'_m)),

    x'_m a row of `references` drawn uniformly (its positions outside the row's mask replaced by
    x's: they are not players), a_m ~ U(0, 1), g = d f_c / d x, M = `n_samples`. A row's sum
    estimates E[f_c(x) - f_c(x')] over the references, without bias.

    Args:
      f: [R, ...] -> [R, C] scores, rows independent; called on [S * R, ...] stacks.
      x: [R, T, ...] float inputs.
      targets: the outputs c, one int or [R] ints.
      key: a PRNG key, or [R] keys, one a row (`row_keys`).
      references: [N, T, ...] the baselines drawn from.
      mask: [R, T] bool, True at real positions.
      n_samples: M.
      max_rows: the most rows one call of f scores: max(1, max_rows // R) samples a call.

    Returns:
      [R, T, ...] signed attributions shaped like x.
    """
    targets = _targets(targets, x)
    rows = x.shape[0]
    copies = min(n_samples, _copies(max_rows, x))
    calls = -(-n_samples // copies)

    def draws(row_key: jax.Array) -> tuple[jax.Array, jax.Array]:
        pick, point = jax.random.split(row_key)
        return (
            jax.random.randint(pick, (calls * copies,), 0, references.shape[0]),
            jax.random.uniform(point, (calls * copies,), x.dtype),
        )

    picks, alphas = jax.vmap(draws)(row_keys(key, rows))  # [R, S'] each
    real = mask.reshape(mask.shape + (1,) * (x.ndim - 2))
    is_sample = (jnp.arange(calls * copies) < n_samples).reshape(calls, copies)
    point_shape = (copies, rows) + (1,) * (x.ndim - 1)

    def add_call(total: jax.Array, call) -> tuple[jax.Array, None]:
        call_picks, call_alphas, call_is_sample = call  # [copies, R] each, [copies]
        chosen = jnp.where(real[None], references[call_picks], x[None])  # [copies, R, T, ...]
        points = chosen + call_alphas.reshape(point_shape) * (x[None] - chosen)
        gradients = input_gradients(f, points.reshape((-1,) + x.shape[1:]), jnp.tile(targets, copies))
        terms = (x[None] - chosen) * gradients.reshape(points.shape)
        return total + jnp.sum(jnp.where(call_is_sample.reshape((copies,) + (1,) * x.ndim), terms, 0), axis=0), None

    def by_call(values: jax.Array) -> jax.Array:  # [R, calls * copies] -> [calls, copies, R]
        return jnp.moveaxis(values.reshape(rows, calls, copies), 0, -1)

    total, _ = jax.lax.scan(add_call, jnp.zeros_like(x), (by_call(picks), by_call(alphas), is_sample))
    return total / n_samples


def occlusion(
    f: Model,
    x: jax.Array,
    targets: int | jax.Array,
    mask: jax.Array,
    *,
    baseline: jax.Array,
    max_rows: int,
    linear_map: LinearMap | None,
    prefix_radius: int | None,
    groups: jax.Array | None,
) -> jax.Array:
    """f_c(x) - f_c(x with position t's values replaced by the baseline's), for every t (with
    `groups`, every group g: all of its positions replaced together).

    The T occluded copies of the rows are scored max(1, `max_rows` // R) copies a call of f.
    Signed: positive where removing the position lowers the output.

    With `linear_map` L, an affine first layer (f = g(L(x)), `f` then g), and `prefix_radius` r,
    L's output at position p reading x only at positions within r of p (a convolution of width
    2r + 1, 'same' padding): occluding t changes L(x) only at |p - t| <= r, and the positions t =
    c, c + s, c + 2s, ... (s = 2r + 1) change it at disjoint positions, so L(x with all of them
    occluded) gives each one's occluded L, read inside its own window. All T occluded copies
    then cost s calls of L and T of g instead of T of both: the same values, as exactly as L's
    own arithmetic. Without `prefix_radius` (None), s = T: L may read every position.

    Args:
      f: [R, T, ...] -> [R, C] scores (of L's outputs when `linear_map`), rows independent.
      x: [R, T, ...] float inputs.
      targets: the outputs c, one int or [R] ints.
      mask: [R, T] bool, True at real positions.
      baseline: x', broadcastable to x.
      max_rows: the most rows one call of f (and of L) scores.
      linear_map: L, an affine map of x (rows independent), or None.
      prefix_radius: how far L reaches, or None: anywhere.
      groups: [R, T] int, each position's group (-1: none), or None: the positions are the
        players.

    Returns:
      [R, T] scores, 0 at padding (with groups: at the ids of no group).
    """
    targets = _targets(targets, x)
    baseline = _baseline(x, baseline)
    length = x.shape[1]
    positions = jnp.arange(length)
    if groups is not None:
        players = player_mask(mask, groups)
        # the whole input, then every group left out in turn
        all_but_one = ~jnp.eye(length, dtype=bool)[:, None, :] & players[None]
        coalitions = jnp.concatenate([players[None], all_but_one])
        values = coalition_values(
            f,
            x,
            baseline,
            targets,
            positions_of(coalitions, mask, groups),
            max_rows=max_rows,
            linear_map=linear_map,
            prefix_radius=prefix_radius,
        )
        return _masked(values[0][:, None] - values[1:].T, players)
    if linear_map is None:
        all_but_one = jnp.broadcast_to(~jnp.eye(length, dtype=bool)[:, None, :], (length,) + mask.shape)
        occluded = coalition_values(
            f, x, baseline, targets, all_but_one, max_rows=max_rows, linear_map=None, prefix_radius=None
        )
        full_input = x
    else:
        copies = _copies(max_rows, x)
        full_input = linear_map(x)
        stride, windows = _strided_windows(length, prefix_radius, full_input.shape, x.shape)
        # [s, R, P, ...]: L with the positions of each residue class mod s occluded together
        occluded_classes = _linear_of_classes(linear_map, baseline, x, stride, copies)

        def occluded_inputs(ts: jax.Array) -> jax.Array:  # [copies] -> [copies * R, P, ...]
            rows = occluded_classes[ts % stride]
            if windows is not None:
                rows = jnp.where(_expand_to(windows[ts][:, None], full_input.ndim + 1), rows, full_input[None])
            return rows.reshape((-1,) + full_input.shape[1:])

        occluded = _scored_in_chunks(f, targets, positions, copies, occluded_inputs)
    full = jnp.take_along_axis(f(full_input).astype(jnp.float32), targets[:, None], axis=1)[:, 0]
    return _masked(full[:, None] - occluded.T, mask)


# ---------------------------------------------------------------------------------------------
# Sampling methods: positions as players of a coalitional game.
# ---------------------------------------------------------------------------------------------


def coalition_values(
    f: Model,
    x: jax.Array,
    baseline: jax.Array,
    targets: int | jax.Array,
    coalitions: jax.Array,
    *,
    max_rows: int,
    linear_map: LinearMap | None,
    prefix_radius: int | None,
) -> jax.Array:
    """f_c of every coalition: the positions with z_t true keep their values, the others take the
    baseline's.

    The N coalitions of the rows are stacked as [N * R, T, ...] and scored by the fewest calls of
    f of at most max(1, `max_rows` // R) coalitions each, under `lax.map` (memory ~ max_rows), as
    equal as they can be: 258 coalitions at most 64 a call are five calls of 52 (two padding
    coalitions scored for nothing), not five of 64 (62).

    With `linear_map` L, an affine first layer (f = g(L(x)), `f` then g), a coalition's input to
    g is L(x') + sum_t z_t C_t, exact for an affine L, with C_t = L(x' + (x - x')_t) - L(x') the
    change one position makes, computed once for the T positions. Each coalition then costs a
    [T] x [T, ...] product and g instead of L and g: worth it where L dominates f and there are
    many more coalitions than positions (iCapsNets' region convolution, KernelSHAP's and LIME's
    hundreds of coalitions). With `prefix_radius` r as well (see `occlusion`), the T changes take
    2r + 1 calls of L instead of T.

    Args:
      f, x, targets: as `occlusion`'s.
      baseline: x' [R, T, ...].
      coalitions: z [N, R, T] bool.
      max_rows: the most rows one call of f (and of L) scores.
      linear_map: L, an affine map of [R, T, ...] inputs (rows independent), or None.
      prefix_radius: how far L reaches (`occlusion`), or None: anywhere.

    Returns:
      [N, R] float32.
    """
    batch = coalitions.shape[1]
    targets = _targets(targets, x)
    copies = _copies(max_rows, x)
    if linear_map is None:

        def inputs(z: jax.Array) -> jax.Array:  # [copies, R, T] -> [copies * R, T, ...]
            values = jnp.where(_expand_to(z, x.ndim + 1), x[None], baseline[None])
            return values.reshape((-1,) + x.shape[1:])
    elif prefix_radius is None:
        offset, contributions = _position_contributions(linear_map, x, baseline, copies)
        row_shape = offset.shape[1:]
        offset, contributions = offset.reshape(batch, -1), contributions.reshape(batch, coalitions.shape[2], -1)

        def inputs(z: jax.Array) -> jax.Array:
            # Batch-major products [R, copies, T] x [R, T, O]: XLA:CPU copies C at every call for
            # the same einsum written coalition-major (about ten times slower at four a call).
            mixed = jnp.einsum("bct,bto->bco", jnp.swapaxes(z, 0, 1).astype(contributions.dtype), contributions)
            return (offset[None] + jnp.swapaxes(mixed, 0, 1)).reshape((-1,) + row_shape)
    else:
        offset, band = _banded_contributions(linear_map, x, baseline, copies, prefix_radius)
        radius = (band.shape[0] - 1) // 2

        def inputs(z: jax.Array) -> jax.Array:
            # L's input at p mixes the coalition's z at p - r .. p + r alone: 2r + 1 products a
            # position instead of T.
            padded = jnp.pad(z, ((0, 0), (0, 0), (radius, radius))).astype(band.dtype)
            # [2r + 1, copies, R, P]: the coalition's z at p + d, d = -r .. r
            shifted = jnp.stack([padded[..., d : d + z.shape[-1]] for d in range(2 * radius + 1)])
            mixed = jnp.sum(_expand_to(shifted, band.ndim + 1) * band[:, None], axis=0)
            return (offset[None] + mixed).reshape((-1,) + offset.shape[1:])

    return _scored_in_chunks(f, targets, coalitions, copies, inputs)


def _scored_in_chunks(f: Model, targets: jax.Array, items: jax.Array, copies: int, inputs) -> jax.Array:
    """[N, R] f_c of the rows `inputs` builds from each of N items ([N, ...]; inputs: [chunk,
    ...] -> [chunk * R, ...]), scored in the fewest calls of at most `copies` items, as equal as
    they can be (padding items repeat the last and are dropped)."""
    n, batch = items.shape[0], targets.shape[0]
    calls, chunk = _even_split(n, copies)
    padded = jnp.concatenate([items, jnp.broadcast_to(items[-1:], (calls * chunk - n,) + items.shape[1:])])

    def values(chunk_items: jax.Array) -> jax.Array:  # [chunk, ...] -> [chunk, R]
        scores = f(inputs(chunk_items)).astype(jnp.float32).reshape(chunk, batch, -1)
        return jnp.take_along_axis(scores, jnp.broadcast_to(targets[None, :, None], (chunk, batch, 1)), axis=2)[..., 0]

    return jax.lax.map(values, padded.reshape((calls, chunk) + items.shape[1:])).reshape(-1, batch)[:n]


def _even_split(n: int, copies: int) -> tuple[int, int]:
    """(calls, items a call): the fewest calls of at most `copies` items covering n, as equal as
    they can be."""
    calls = -(-n // copies)
    return calls, -(-n // calls)


def _expand_to(z: jax.Array, ndim: int) -> jax.Array:
    """z with trailing axes of length 1 up to `ndim` axes."""
    return z.reshape(z.shape + (1,) * (ndim - z.ndim))


def _strided_windows(
    length: int, radius: int | None, output_shape: tuple, input_shape: tuple
) -> tuple[int, jax.Array | None]:
    """(s, windows [T, T] bool): positions t = c mod s (s = 2r + 1, at most T) change an L of
    radius r at the disjoint windows[t] = (|p - t| <= r); L's outputs must then be [R, T, ...], by
    position like its inputs. radius None: (T, None), one position a class, L changed anywhere."""
    if radius is None:
        return length, None
    if output_shape[:2] != input_shape[:2]:
        raise ValueError(
            f"prefix_radius: the affine prefix's outputs must be [B, T, ...] position by position like its "
            f"inputs {input_shape[:2]}, got shape {output_shape}"
        )
    positions = jnp.arange(length)
    return min(2 * radius + 1, length), jnp.abs(positions[None, :] - positions[:, None]) <= radius


def _linear_of_classes(linear_map, x, other, stride: int, copies: int) -> jax.Array:
    """[s, R, ...] L of x at the positions t = c mod s and `other` elsewhere, c = 0 .. s - 1,
    at most `copies` classes a call."""
    length = x.shape[1]
    classes = jnp.arange(length)[None, :] % stride == jnp.arange(stride)[:, None]  # [s, T]

    def of_classes(chunk_classes: jax.Array) -> jax.Array:  # [chunk, T] -> [chunk, R, ...]
        inside = _expand_to(chunk_classes[:, None], x.ndim + 1)
        return jax.vmap(linear_map)(jnp.where(inside, x[None], other[None]))

    calls, chunk = _even_split(stride, copies)
    padded = jnp.concatenate([classes, jnp.broadcast_to(classes[-1:], (calls * chunk - stride, length))])
    outputs = jax.lax.map(of_classes, padded.reshape(calls, chunk, length))
    return outputs.reshape((-1,) + outputs.shape[2:])[:stride]


def _position_contributions(linear_map, x, baseline, copies: int):
    """(L(x') [R, ...], C [R, T, ...]): C_t = L(x' with position t from x) - L(x'), at most
    `copies` positions a call of L."""
    offset = linear_map(baseline)
    changes = _linear_of_classes(linear_map, x, baseline, x.shape[1], copies) - offset[None]  # [T, R, ...]
    return offset, jnp.swapaxes(changes, 0, 1)


def _banded_contributions(linear_map, x, baseline, copies: int, prefix_radius: int):
    """(L(x') [R, P, ...], band [2r + 1, R, P, ...]) for an L of radius r (`occlusion`): band[r +
    d, :, p] = the change position p + d makes to L at p (0 where p + d is outside 0 .. T - 1),
    from the 2r + 1 calls of L that change the positions of each residue class mod 2r + 1."""
    offset = linear_map(baseline)
    length = x.shape[1]
    stride, _ = _strided_windows(length, prefix_radius, offset.shape, x.shape)
    changes = _linear_of_classes(linear_map, x, baseline, stride, copies) - offset[None]  # [s, R, P, ...]
    radius = min(prefix_radius, length - 1)
    positions = jnp.arange(length)
    sources = positions[None, :] + jnp.arange(-radius, radius + 1)[:, None]  # [2r + 1, P]: p + d
    band = changes[sources % stride, :, positions[None, :]]  # [2r + 1, P, R, ...]
    inside = _expand_to((sources >= 0) & (sources < length), band.ndim)
    return offset, jnp.swapaxes(jnp.where(inside, band, 0.0), 1, 2)


def key_count(key: jax.Array, rows: int) -> int | None:
    """None when `key` is one PRNG key, `rows` when it holds one key a row ([rows] typed keys, or
    raw uint32 [rows, 2]); any other shape is refused."""
    single = 0 if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) else 1  # raw keys are uint32 [2]
    if key.ndim == single:
        return None
    if key.ndim == single + 1 and key.shape[0] == rows:
        return rows
    raise ValueError(f"key: expected one PRNG key or {rows} of them (one a row), got keys of shape {key.shape}")


def row_keys(key: jax.Array, rows: int) -> jax.Array:
    """[rows] PRNG keys, one a row: `key` split, or `key` itself when it holds one key a row."""
    return jax.random.split(key, rows) if key_count(key, rows) is None else key


# This function and the coalition designs and regressions below are jitted (sizes static):
# called eagerly, outside a jit of the caller's, each of their many small operations would compile
# on its own, which made an eager KernelSHAP's first call several times slower.
@functools.partial(jax.jit, static_argnames="shape")
def _random_ranks(key: jax.Array, mask: jax.Array, shape: tuple) -> jax.Array:
    """[*shape, R, T] a uniformly random order of each row's real positions (ranks 0..M-1), the
    padding after them."""
    uniform = jax.vmap(lambda k: jax.random.uniform(k, shape + mask.shape[1:]))(row_keys(key, mask.shape[0]))
    draws = jnp.where(jnp.broadcast_to(mask, shape + mask.shape), jnp.moveaxis(uniform, 0, len(shape)), 2.0)
    return jnp.argsort(jnp.argsort(draws, axis=-1), axis=-1)


def _binomial(n: jax.Array, k: jax.Array, length: int) -> jax.Array:
    """C(n, k) as float32 for 0 <= n <= `length` (0 where k < 0 or k > n), read from Pascal's
    triangle built in NumPy (a lookup: XLA compiles it in a fraction of the time of gammaln),
    exact while it is below 2^24."""
    triangle = np.zeros((length + 1, length + 1), np.float64)
    triangle[:, 0] = 1.0
    for row in range(1, length + 1):
        triangle[row, 1:] = triangle[row - 1, 1:] + triangle[row - 1, :-1]
    valid = (k >= 0) & (k <= n) & (n >= 0)
    table = jnp.asarray(triangle.astype(np.float32))
    return jnp.where(valid, table[jnp.clip(n, 0, length), jnp.clip(k, 0, length)], 0.0)


def _unrank_subset(rank: jax.Array, size: jax.Array, m: jax.Array, length: int) -> jax.Array:
    """The `rank`-th (in lexicographic order) subset of `size` of the players 0..m-1, as [length]
    bool over the players (the combinatorial number system)."""

    def choose(player, carry):
        rank, left, chosen = carry
        with_player = _binomial(m - player - 1, left - 1, length)  # the subsets that take this player next
        take = (left > 0) & (player < m) & (rank < with_player)
        rank = jnp.where((left > 0) & (player < m) & ~take, rank - with_player, rank)
        return rank, left - take.astype(left.dtype), chosen.at[player].set(take)

    return jax.lax.fori_loop(
        0, length, choose, (rank.astype(jnp.float32), size.astype(jnp.int32), jnp.zeros(length, bool))
    )[2]


def _kernel_design_row(key: jax.Array, mask: jax.Array, n_samples: int) -> tuple[jax.Array, jax.Array]:
    """`shapley_kernel_design` of one row: mask [T] -> ([N, T] bool, [N] float32)."""
    length = mask.shape[0]
    m = jnp.sum(mask, dtype=jnp.int32)
    sizes = jnp.arange(1, length // 2 + 1, dtype=jnp.int32)  # s, paired with its complement's size m - s
    active = sizes <= m // 2  # s = 1 .. ceil((m - 1) / 2)
    paired = sizes <= (m - 1) // 2  # m - s is another size (not the middle one of an even m)
    pairing = jnp.where(paired, 2.0, 1.0)
    m_real, sizes_real = m.astype(jnp.float32), sizes.astype(jnp.float32)
    kernel = jnp.where(active, pairing * (m_real - 1) / jnp.maximum(sizes_real * (m_real - sizes_real), 1.0), 0.0)
    weight = kernel / jnp.maximum(jnp.sum(kernel), 1e-30)  # of each size (with its complement's)
    count = jnp.where(active, pairing * _binomial(m, sizes, length), jnp.inf)  # coalitions of each size
    # Enumerate the sizes, smallest first, while the budget left covers a size's share of the
    # kernel weight left with every one of its coalitions (SHAP's KernelExplainer does the same).
    weight_left_from = jnp.cumsum(weight[::-1])[::-1]
    used_before = jnp.cumsum(count) - count
    covered = active & ((n_samples - used_before) * weight / jnp.maximum(weight_left_from, 1e-30) / count >= 1 - 1e-6)
    enumerated = jnp.cumprod(covered).astype(bool)
    block = jnp.where(enumerated, count, 0.0)
    enumerated_total = jnp.sum(block)
    block_end = jnp.cumsum(block)
    weight_left = jnp.sum(jnp.where(active & ~enumerated, weight, 0.0))
    rank_of_position = jnp.cumsum(mask, dtype=jnp.int32) - 1  # the players are the real positions, in order
    # The sampled part: pairs of a coalition and its complement, their sizes by systematic
    # sampling of the kernel weight left (stratified: each size drawn in proportion to its
    # weight, to within one pair), their members uniformly.
    remaining = jnp.cumsum(jnp.where(active & ~enumerated, weight, 0.0)) / jnp.maximum(weight_left, 1e-30)
    pairs = jnp.maximum(jnp.ceil((n_samples - enumerated_total) / 2), 1.0)
    max_pairs = max(1, (n_samples + 1) // 2)
    offset_key, member_key = jax.random.split(key)
    offset = jax.random.uniform(offset_key)
    members = jax.random.uniform(member_key, (max_pairs, length))
    players_real = jnp.arange(length) < m

    def slot(j):
        in_enumeration = j < enumerated_total
        # Enumerated: size block, then rank within it (a coalition and its complement in turn).
        size_index = jnp.searchsorted(block_end, j, side="right")
        within = j - jnp.where(size_index > 0, block_end[jnp.maximum(size_index - 1, 0)], 0.0)
        is_paired = paired[jnp.minimum(size_index, len(sizes) - 1)]
        rank = jnp.where(is_paired, within // 2, within)
        flip_enumerated = is_paired & (jnp.mod(within, 2) == 1)
        players = _unrank_subset(rank, sizes[jnp.minimum(size_index, len(sizes) - 1)], m, length)
        # Sampled: pair q of the slots after the enumeration.
        q = jnp.maximum((j - enumerated_total) // 2, 0.0)
        drawn_size = sizes[jnp.minimum(jnp.searchsorted(remaining, (q + offset) / pairs, side="right"), len(sizes) - 1)]
        draw = members[jnp.clip(q.astype(jnp.int32), 0, max_pairs - 1)]
        member_rank = jnp.argsort(jnp.argsort(jnp.where(players_real, draw, 2.0)))
        flip_sampled = jnp.mod(j - enumerated_total, 2) == 1
        in_subset = jnp.where(in_enumeration, players, member_rank < drawn_size)
        in_subset = in_subset ^ jnp.where(in_enumeration, flip_enumerated, flip_sampled)
        coalition = mask & in_subset[jnp.clip(rank_of_position, 0, length - 1)]
        enumerated_weight = (
            weight[jnp.minimum(size_index, len(sizes) - 1)] / count[jnp.minimum(size_index, len(sizes) - 1)]
        )
        sampled_weight = weight_left / jnp.maximum(n_samples - enumerated_total, 1.0)
        return coalition, jnp.where(in_enumeration, enumerated_weight, sampled_weight)

    return jax.vmap(slot)(jnp.arange(n_samples, dtype=jnp.float32))


@functools.partial(jax.jit, static_argnames="n_samples")
def shapley_kernel_design(key: jax.Array, mask: jax.Array, *, n_samples: int) -> tuple[jax.Array, jax.Array]:
    """KernelSHAP's coalitions of the real positions and their weights, as SHAP's KernelExplainer
    chooses them, with the sampled sizes stratified.

    A row with M real positions puts the Shapley kernel's weight (M - 1) / (s (M - s)) on each size
    s = 1..M-1, a size and its complement's (M - s) together. Sizes are taken smallest first
    while the samples left cover the size's share of the weight left with all of its coalitions:
    those are enumerated (each coalition and its complement), weighted w_s / C(M, s). The
    samples after them are pairs of a coalition and its complement whose sizes are drawn by
    systematic sampling of the weight left (stratified: every size in proportion to its weight,
    to within one pair) and whose members are uniform; they share the weight left equally. With
    n_samples >= 2^M - 2 every coalition is enumerated and KernelSHAP gives the exact Shapley
    values. Rows with fewer than two real positions get weight 0 (their one value is fixed by
    efficiency).

    Args:
      key: a PRNG key, or [R] keys, one a row (`row_keys`).
      mask: [R, T] bool.
      n_samples: N, the coalitions of every row.

    Returns:
      coalitions [N, R, T] bool (false at padding) and weights [N, R] float32, each row's summing
      to 1 (0 for rows with fewer than two real positions).
    """
    keys = row_keys(key, mask.shape[0])
    coalitions, weights = jax.vmap(_kernel_design_row, in_axes=(0, 0, None))(keys, mask, n_samples)
    return jnp.swapaxes(coalitions, 0, 1), weights.T


def _solve_symmetric(a: jax.Array, b: jax.Array) -> jax.Array:
    """x [R, T] with a x = b for symmetric positive definite a [R, T, T] and b [R, T]:
    Gauss-Jordan elimination without pivoting (stable for such matrices) in `lax.fori_loop`.
    Plain lax, not LAPACK: XLA:CPU's LAPACK calls can stall a computation that spans several
    CPU devices, as the parameters of a multi-device run do."""
    rows = jnp.arange(a.shape[-1])

    def eliminate(k, carry):
        a, b = carry
        pivot = a[:, k, k]
        row, rhs = a[:, k, :] / pivot[:, None], b[:, k] / pivot
        factor = jnp.where(rows[None, :] == k, 0.0, a[:, :, k])  # [R, T]: every other row
        a = a - factor[:, :, None] * row[:, None, :]
        b = b - factor * rhs[:, None]
        a = jnp.where((rows == k)[None, :, None], row[:, None, :], a)
        b = jnp.where((rows == k)[None, :], rhs[:, None], b)
        return a, b

    return jax.lax.fori_loop(0, a.shape[-1], eliminate, (a, b))[1]


@jax.jit
def constrained_shapley_regression(
    values: jax.Array,
    full_value: jax.Array,
    empty_value: jax.Array,
    coalitions: jax.Array,
    mask: jax.Array,
    weights: jax.Array,
) -> jax.Array:
    """KernelSHAP's estimate: min sum_n w_n (v_n - v_0 - z_n^T phi)^2 subject to sum_t phi_t =
    v_1 - v_0 (efficiency), in closed form (Covert & Lee 2021):

        A = sum w z z^T / sum w,   b = sum w z (v - v_0) / sum w
        phi = A^-1 (b - 1 (1^T A^-1 b - (v_1 - v_0)) / (1^T A^-1 1))

    with the padding's rows of A set to the identity (its phi is 0) and a ridge of 1e-6 on the
    diagonal.
    With every coalition and the Shapley kernel's weights, phi are the exact Shapley values.

    Args:
      values: v_n [N, R], the coalitions' outputs.
      full_value, empty_value: v_1, v_0 [R], the outputs with every real position and with none.
      coalitions: z [N, R, T] bool.
      mask: [R, T] bool, the players.
      weights: w [N, R].

    Returns:
      [R, T] float32, 0 at padding, summing to v_1 - v_0.
    """
    z = coalitions.astype(jnp.float32)
    w = weights.astype(jnp.float32)
    total = jnp.maximum(jnp.sum(w, axis=0), 1e-30)  # [R]
    a = jnp.einsum("nb,nbt,nbu->btu", w, z, z) / total[:, None, None]
    players = mask.astype(jnp.float32)
    a = a + jnp.eye(mask.shape[1])[None] * ((1.0 - players) + _SHAPLEY_RIDGE)[:, None, :]
    b = jnp.einsum("nb,nbt,nb->bt", w, z, values - empty_value[None]) / total[:, None]
    both = _solve_symmetric(jnp.concatenate([a, a]), jnp.concatenate([b, players]))
    a_inv_b, a_inv_u = both[: len(b)], both[len(b) :]
    excess = jnp.sum(players * a_inv_b, axis=-1) - (full_value - empty_value)
    phi = a_inv_b - a_inv_u * (excess / jnp.maximum(jnp.sum(players * a_inv_u, axis=-1), 1e-30))[:, None]
    return _masked(phi, mask)


def kernel_shap(
    f: Model,
    x: jax.Array,
    targets: int | jax.Array,
    mask: jax.Array,
    key: jax.Array,
    *,
    n_samples: int,
    baseline: jax.Array,
    max_rows: int,
    linear_map: LinearMap | None,
    prefix_radius: int | None,
    groups: jax.Array | None,
) -> jax.Array:
    """Shapley values of the real positions (or of the `groups`) estimated by KernelSHAP (module
    docstring).

    Args:
      f, x, targets, mask: as `occlusion`'s.
      key: draws the coalitions (a PRNG key, or [R] keys, one a row).
      n_samples: coalitions a row (`shapley_kernel_design`; each costs one row of f).
      baseline: x', broadcastable to x.
      max_rows, linear_map, prefix_radius: as `coalition_values`'s (`linear_map` L of an affine
        first layer, `f` then scoring L's outputs; None: `f` scores x).
      groups: as `occlusion`'s.

    Returns:
      [R, T] signed scores, 0 at padding, summing to f_c(x) - f_c(x') over t.
    """
    baseline = _baseline(x, baseline)
    players = player_mask(mask, groups)
    coalitions, weights = shapley_kernel_design(key, players, n_samples=n_samples)
    ends = jnp.stack([players, jnp.zeros_like(players)])
    values = coalition_values(
        f,
        x,
        baseline,
        targets,
        positions_of(jnp.concatenate([coalitions, ends]), mask, groups),
        max_rows=max_rows,
        linear_map=linear_map,
        prefix_radius=prefix_radius,
    )
    return constrained_shapley_regression(values[:-2], values[-2], values[-1], coalitions, players, weights)


def shapley_sampling(
    f: Model,
    x: jax.Array,
    targets: int | jax.Array,
    mask: jax.Array,
    key: jax.Array,
    *,
    n_permutations: int,
    baseline: jax.Array,
    max_rows: int,
    linear_map: LinearMap | None,
    prefix_radius: int | None,
    groups: jax.Array | None,
) -> jax.Array:
    """Shapley values of the real positions (or of the `groups`) from antithetic permutation
    sampling.

    Each of the `n_permutations` orders (half drawn, half their reverses) adds the real positions
    one at a time, from the baseline to the input: T + 1 coalitions an order, scored by
    `coalition_values`; phi_t is the mean change of f_c when t joins.

    Args:
      f, x, targets, mask: as `occlusion`'s.
      key: draws the orders (a PRNG key, or [R] keys, one a row).
      n_permutations: P, even (an odd P is rounded up); costs P (T + 1) rows of f a row.
      baseline: x', broadcastable to x.
      max_rows, linear_map, prefix_radius: as `coalition_values`'s.
      groups: as `occlusion`'s.

    Returns:
      [R, T] signed scores, 0 at padding, summing exactly to f_c(x) - f_c(x') over t.
    """
    baseline = _baseline(x, baseline)
    players = player_mask(mask, groups)
    half = (n_permutations + 1) // 2
    ranks = _random_ranks(key, players, (half,))  # [half, R, T]
    real = jnp.sum(players, axis=-1)[None, :, None]
    ranks = jnp.concatenate([ranks, jnp.where(players[None], real - 1 - ranks, ranks)])  # the reversed orders
    steps = jnp.arange(mask.shape[1] + 1)
    coalitions = (ranks[:, None] < steps[None, :, None, None]) & players[None, None]  # [P, T + 1, R, T]
    values = coalition_values(
        f,
        x,
        baseline,
        targets,
        positions_of(coalitions.reshape((-1,) + mask.shape), mask, groups),
        max_rows=max_rows,
        linear_map=linear_map,
        prefix_radius=prefix_radius,
    ).reshape(coalitions.shape[:3])  # [P, T + 1, R]
    by_order = jnp.moveaxis(values, 1, -1)  # [P, R, T + 1]
    joined = jnp.take_along_axis(by_order, ranks + 1, axis=-1) - jnp.take_along_axis(by_order, ranks, axis=-1)
    return _masked(jnp.mean(joined, axis=0), players)


@functools.partial(jax.jit, static_argnames="n_samples")
def lime_coalitions(key: jax.Array, mask: jax.Array, *, n_samples: int) -> jax.Array:
    """LIME's text samples: the input itself, then coalitions without a uniform number 1..M of
    the M real positions (uniformly chosen). Returns [N, R, T] bool, false at padding."""
    count_keys, order_keys = jnp.swapaxes(jax.vmap(jax.random.split)(row_keys(key, mask.shape[0])), 0, 1)
    real = jnp.sum(mask, axis=-1)  # [R]
    removed = jax.vmap(lambda k, m: jax.random.randint(k, (n_samples - 1,), 1, jnp.maximum(m, 1) + 1))(count_keys, real)
    kept = (_random_ranks(order_keys, mask, (n_samples - 1,)) >= removed.T[..., None]) & mask[None]
    return jnp.concatenate([mask[None], kept])


@jax.jit
def lime_weights(coalitions: jax.Array, mask: jax.Array, *, kernel_width: float) -> jax.Array:
    """LIME's text kernel: sqrt(exp(-d^2 / width^2)) of the cosine distance d between each
    coalition and the input (LIME's distance is 100 d and its width 25). [N, R]."""
    kept = jnp.sum(coalitions, axis=-1).astype(jnp.float32)
    real = jnp.maximum(jnp.sum(mask, axis=-1), 1).astype(jnp.float32)
    distance = 1.0 - jnp.sqrt(kept / real[None])
    return jnp.sqrt(jnp.exp(-jnp.square(distance) / kernel_width**2))


@jax.jit
def weighted_ridge(
    values: jax.Array, coalitions: jax.Array, weights: jax.Array, mask: jax.Array, *, alpha: float
) -> jax.Array:
    """The coefficients beta [R, T] of ridge regression with an intercept, min sum_n w_n (v_n - c
    - z_n^T beta)^2 + alpha |beta|^2, per example (scikit-learn's `Ridge(alpha)` with
    `sample_weight`): solved on the weighted-centred data. Padding's coefficients are 0."""
    z = coalitions.astype(jnp.float32)
    w = weights.astype(jnp.float32)
    total = jnp.maximum(jnp.sum(w, axis=0), 1e-30)
    z_centred = z - (jnp.einsum("nb,nbt->bt", w, z) / total[:, None])[None]
    v_centred = values - (jnp.sum(w * values, axis=0) / total)[None]
    gram = jnp.einsum("nb,nbt,nbu->btu", w, z_centred, z_centred) + alpha * jnp.eye(mask.shape[1])[None]
    moment = jnp.einsum("nb,nbt,nb->bt", w, z_centred, v_centred)
    return _masked(_solve_symmetric(gram, moment), mask)


def lime(
    f: Model,
    x: jax.Array,
    targets: int | jax.Array,
    mask: jax.Array,
    key: jax.Array,
    *,
    n_samples: int,
    kernel_width: float,
    alpha: float,
    baseline: jax.Array,
    max_rows: int,
    linear_map: LinearMap | None,
    prefix_radius: int | None,
    groups: jax.Array | None,
) -> jax.Array:
    """LIME's weights of the real positions (or of the `groups`, as `occlusion`'s; module
    docstring): `n_samples` coalitions
    (`lime_coalitions`) scored by `coalition_values` (`max_rows`, `linear_map` and
    `prefix_radius` as there), weighted by `lime_weights` of width `kernel_width` and fitted by
    `weighted_ridge` of penalty `alpha`; `f`, `x`, `targets`, `mask` as `occlusion`'s, `key` as
    `kernel_shap`'s.

    Returns:
      [R, T] signed coefficients, 0 at padding.
    """
    baseline = _baseline(x, baseline)
    players = player_mask(mask, groups)
    coalitions = lime_coalitions(key, players, n_samples=n_samples)
    values = coalition_values(
        f,
        x,
        baseline,
        targets,
        positions_of(coalitions, mask, groups),
        max_rows=max_rows,
        linear_map=linear_map,
        prefix_radius=prefix_radius,
    )
    return weighted_ridge(
        values, coalitions, lime_weights(coalitions, players, kernel_width=kernel_width), players, alpha=alpha
    )


def random_scores(key: jax.Array, mask: jax.Array) -> jax.Array:
    """Uniform [0, 1) scores at the real positions of mask [R, T]: a ranking that knows nothing."""
    return _masked(jax.vmap(lambda k: jax.random.uniform(k, mask.shape[1:]))(row_keys(key, mask.shape[0])), mask)
