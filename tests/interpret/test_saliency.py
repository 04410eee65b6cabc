"""Attributions on hand-built linear and tanh models, and box metrics on hand-made maps."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.attribution import _kernels as sal
from jcaps.attribution import checks, methods

# Every test runs the kernels jitted, as callers do: f and the options are static. Eager dispatch
# of their scans would also be several times slower.
integrated_gradients = jax.jit(
    sal.integrated_gradients, static_argnums=0, static_argnames=("n_steps", "rule", "max_rows", "linear_map")
)
smoothgrad = jax.jit(sal.smoothgrad, static_argnums=0, static_argnames=("n_samples",))

# B = 3 examples of T x N = 2 x 4 inputs, C = 3 classes.
BATCH, STEPS, FEATURES, CLASSES = 3, 2, 4, 3
HIDDEN = 5
TARGETS = jnp.array([0, 2, 1])

_keys = jax.random.split(jax.random.key(0), 5)
X = jax.random.normal(_keys[0], (BATCH, STEPS, FEATURES))
BASELINE = 0.3 * jax.random.normal(_keys[1], (BATCH, STEPS, FEATURES))
W = jax.random.normal(_keys[2], (STEPS * FEATURES, CLASSES))
W1 = jax.random.normal(_keys[3], (STEPS * FEATURES, HIDDEN)) / 2
W2 = jax.random.normal(_keys[4], (HIDDEN, CLASSES))
ZEROS = jnp.zeros_like(X)
# Every interpolation point of the integrated gradients below in one call of f.
ALL_STEPS = 200 * BATCH


def linear_scores(x):
    return x.reshape(x.shape[0], -1) @ W


def tanh_mlp_scores(x):
    return jnp.tanh(x.reshape(x.shape[0], -1) @ W1) @ W2


def _target_columns(targets):
    """W's column of each example's class, shaped like X: d logit_c / d x."""
    return W[:, targets].T.reshape(X.shape)


def _position_norms(values):
    """[B, T, N] -> [B, T]: the L2 norm of each position's N values, as NumPy computes it."""
    return np.linalg.norm(np.asarray(values, np.float64), axis=-1)


# ---------------------------------------------------------------------------------------------
# Gradient (`methods.gradient`: the norm of each position's gradient)
# ---------------------------------------------------------------------------------------------


def test_gradient_of_linear_logit_is_the_norm_of_the_weight_column():
    out = methods.gradient(linear_scores, X, TARGETS)
    chex.assert_shape(out, X.shape[:2])
    np.testing.assert_allclose(out, _position_norms(_target_columns(TARGETS)), rtol=1e-6)


def test_one_backward_pass_equals_per_example_gradients():
    def per_example(x, c):
        return jax.grad(lambda xi: tanh_mlp_scores(xi[None])[0, c])(x)

    expected = _position_norms(jax.jit(jax.vmap(per_example))(X, TARGETS))
    np.testing.assert_allclose(methods.gradient(tanh_mlp_scores, X, TARGETS), expected, rtol=1e-5, atol=1e-7)


# ---------------------------------------------------------------------------------------------
# Integrated gradients
# ---------------------------------------------------------------------------------------------


def test_integrated_gradients_of_linear_model_is_exact():
    out = integrated_gradients(linear_scores, X, TARGETS, baseline=BASELINE, n_steps=4, rule="midpoint", max_rows=ALL_STEPS,
                               linear_map=None)
    chex.assert_shape(out, X.shape)
    np.testing.assert_allclose(out, (X - BASELINE) * _target_columns(TARGETS), rtol=1e-5, atol=1e-6)


def test_integrated_gradients_completeness():
    out = integrated_gradients(tanh_mlp_scores, X, TARGETS, baseline=BASELINE, n_steps=200, rule="midpoint", max_rows=ALL_STEPS,
                               linear_map=None)

    def selected(x):
        return jnp.take_along_axis(tanh_mlp_scores(x), TARGETS[:, None], axis=1)[:, 0]

    np.testing.assert_allclose(out.sum(axis=(1, 2)), selected(X) - selected(BASELINE), atol=2e-4)


@pytest.mark.parametrize("steps_a_call", [7, 10, 50, 64])
def test_integrated_gradients_chunking_matches_unchunked(steps_a_call):
    options = {"baseline": ZEROS, "n_steps": 50, "rule": "midpoint", "linear_map": None}
    unchunked = integrated_gradients(tanh_mlp_scores, X, TARGETS, max_rows=ALL_STEPS, **options)
    chunked = integrated_gradients(tanh_mlp_scores, X, TARGETS, max_rows=steps_a_call * BATCH, **options)
    np.testing.assert_allclose(chunked, unchunked, rtol=1e-6, atol=1e-6)


def test_integrated_gradients_default_baseline_is_zero():
    default = methods.integrated_gradients(tanh_mlp_scores, X, 1, n_steps=8)
    zero = methods.integrated_gradients(tanh_mlp_scores, X, 1, baseline=jnp.zeros_like(X), n_steps=8)
    np.testing.assert_allclose(default, zero, rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# SmoothGrad
# ---------------------------------------------------------------------------------------------


def test_smoothgrad_shape_and_determinism():
    key = jax.random.key(1)
    first = smoothgrad(tanh_mlp_scores, X, TARGETS, key, n_samples=4, stddev=0.15)
    chex.assert_shape(first, X.shape)
    np.testing.assert_array_equal(first, smoothgrad(tanh_mlp_scores, X, TARGETS, key, n_samples=4, stddev=0.15))
    other_key = smoothgrad(tanh_mlp_scores, X, TARGETS, jax.random.key(2), n_samples=4, stddev=0.15)
    assert not np.allclose(first, other_key)


def test_smoothgrad_of_linear_logit_ignores_noise():
    out = smoothgrad(linear_scores, X, TARGETS, jax.random.key(3), n_samples=5, stddev=0.5)
    np.testing.assert_allclose(out, jnp.abs(_target_columns(TARGETS)), rtol=1e-6)


def test_smoothgrad_without_noise_is_the_gradient():
    out = methods.smoothgrad(tanh_mlp_scores, X, TARGETS, key=jax.random.key(4), n_samples=4, stddev=0.0)
    np.testing.assert_allclose(out, methods.gradient(tanh_mlp_scores, X, TARGETS), rtol=1e-6, atol=1e-8)


# ---------------------------------------------------------------------------------------------
# Targets under jit
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", [1, TARGETS], ids=["int", "array"])
def test_jitted_attributions_take_int_or_per_example_targets(target):
    gradient = _target_columns(jnp.broadcast_to(target, (BATCH,)))
    out = jax.jit(lambda x, t: methods.gradient(linear_scores, x, t))(X, target)
    chex.assert_shape(out, X.shape[:2])
    np.testing.assert_allclose(out, _position_norms(gradient), rtol=1e-6)
    out = integrated_gradients(linear_scores, X, target, baseline=BASELINE, n_steps=9, rule="midpoint", max_rows=4 * BATCH,
                               linear_map=None)
    chex.assert_shape(out, X.shape)
    np.testing.assert_allclose(out, (X - BASELINE) * gradient, rtol=1e-5, atol=1e-6)
    out = smoothgrad(linear_scores, X, target, jax.random.key(5), n_samples=3, stddev=0.15)
    chex.assert_shape(out, X.shape)
    np.testing.assert_allclose(out, jnp.abs(gradient), rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# Box metrics
# ---------------------------------------------------------------------------------------------

BOX = np.array([[0, 1, 1], [0, 0, 1]], dtype=np.float32)


def test_map_equal_to_box_is_perfect():
    maps = np.stack([BOX, -3 * BOX])  # scale and sign are removed by |.| and min-max scaling
    np.testing.assert_allclose(checks.weighted_jaccard(maps, BOX), [1, 1])
    np.testing.assert_allclose(checks.euclidean_distance(maps, BOX), [0, 0])
    np.testing.assert_allclose(checks.roc_auc(maps, BOX), [1, 1])


def test_constant_map_scales_to_zero():
    maps = np.stack([np.zeros_like(BOX), np.full_like(BOX, 2.5)])
    np.testing.assert_array_equal(checks.weighted_jaccard(maps, BOX), [0, 0])
    np.testing.assert_allclose(checks.euclidean_distance(maps, BOX), [1, 1])
    np.testing.assert_allclose(checks.roc_auc(maps, BOX), [0.5, 0.5])


def test_inverted_map():
    maps = (1 - BOX)[None]
    np.testing.assert_array_equal(checks.weighted_jaccard(maps, BOX), [0])
    # R - S is 1 in every cell: sqrt(6) / sqrt(3).
    np.testing.assert_allclose(checks.euclidean_distance(maps, BOX), [np.sqrt(2)])
    np.testing.assert_array_equal(checks.roc_auc(maps, BOX), [0])


def test_metrics_by_hand():
    # |map| = [0, 2, 4, 1, 3, 2] scales to S = [0, .5, 1, .25, .75, .5]; R = [0, 1, 1, 0, 0, 1].
    maps = np.array([[[0, -2, 4], [1, 3, 2]]], dtype=np.float32)
    # min(R, S) sums to 0 + .5 + 1 + 0 + 0 + .5 = 2; max(R, S) to 0 + 1 + 1 + .25 + .75 + 1 = 4.
    np.testing.assert_allclose(checks.weighted_jaccard(maps, BOX), [0.5])
    # (R - S)^2 = [0, .25, 0, .0625, .5625, .25] sums to 1.125; ||R||^2 = 3.
    np.testing.assert_allclose(checks.euclidean_distance(maps, BOX), [np.sqrt(1.125 / 3)])
    # Inside {.5, 1, .5} against outside {0, .25, .75}: .5 beats 2, 1 beats 3, .5 beats 2; 7 of 9.
    np.testing.assert_allclose(checks.roc_auc(maps, BOX), [7 / 9])
    np.testing.assert_allclose(list(checks.box_metrics(maps, BOX).values()), [0.5, np.sqrt(1.125 / 3), 7 / 9])


def test_auc_counts_ties_as_half():
    # S = [0, .5, 1, .5, .75, .25]: inside {.5, 1, .25}, outside {0, .5, .75}.
    # .5 beats 0, ties .5, loses to .75 (1.5); 1 beats all (3); .25 beats 0 (1): 5.5 of 9.
    maps = np.array([[[0, 2, 4], [2, 3, 1]]], dtype=np.float32)
    np.testing.assert_allclose(checks.roc_auc(maps, BOX), [5.5 / 9])


def test_auc_matches_pairwise_count():
    rng = np.random.default_rng(0)
    maps = rng.integers(0, 4, size=(4, 5, 6)).astype(np.float32)  # few values: many ties
    boxes = rng.integers(0, 2, size=(4, 5, 6))
    boxes[:, 0, 0], boxes[:, 0, 1] = 1, 0
    scaled = np.abs(maps).reshape(4, -1)
    expected = []
    for scores, inside in zip(scaled, boxes.reshape(4, -1).astype(bool), strict=True):
        comparison = scores[inside][:, None] - scores[~inside][None, :]
        expected.append(((comparison > 0) + 0.5 * (comparison == 0)).mean())
    np.testing.assert_allclose(checks.roc_auc(maps, boxes), expected)


def test_per_example_boxes_and_batch_average():
    maps = np.stack([BOX, 1 - BOX])
    boxes = np.stack([BOX, 1 - BOX])
    np.testing.assert_allclose(checks.roc_auc(maps, boxes), [1, 1])
    metrics = checks.box_metrics(maps, np.stack([BOX, BOX]))
    assert all(isinstance(value, float) for value in metrics.values())
    # Example 0 is perfect (1, 0, 1), example 1 inverted (0, sqrt(2), 0).
    np.testing.assert_allclose([metrics["wjac"], metrics["euclidean"], metrics["auc"]], [0.5, np.sqrt(2) / 2, 0.5])


def test_metrics_reject_bad_boxes():
    with pytest.raises(ValueError, match="shaped"):
        checks.weighted_jaccard(BOX[None], BOX[:, :2])
    with pytest.raises(ValueError, match="non-empty"):
        checks.euclidean_distance(BOX[None], np.zeros_like(BOX))
    with pytest.raises(ValueError, match="outside"):
        checks.roc_auc(BOX[None], np.ones_like(BOX))
