"""Per-example losses against values worked out by hand."""
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.ops import losses


def test_margin_loss_hand_computed():
    lengths = jnp.array([[0.95, 0.3, 0.05], [0.5, 0.2, 0.8]])
    labels = jnp.array([0, 2])
    # Example 0: target 0.95 >= 0.9 -> 0; 0.5 * (0.3 - 0.1)^2 = 0.02; 0.05 <= 0.1 -> 0.
    # Example 1: target (0.9 - 0.8)^2 = 0.01; 0.5 * 0.4^2 = 0.08; 0.5 * 0.1^2 = 0.005.
    loss = losses.margin_loss(lengths, labels)
    chex.assert_shape(loss, (2,))
    np.testing.assert_allclose(loss, [0.02, 0.095], rtol=1e-6)


def test_margin_loss_knobs():
    lengths = jnp.array([[0.5, 0.5]])
    # T = class 0: (0.7 - 0.5)^2 + 2 * (0.5 - 0.3)^2 = 0.04 + 0.08.
    loss = losses.margin_loss(lengths, jnp.array([0]), m_plus=0.7, m_minus=0.3, lam=2.0)
    np.testing.assert_allclose(loss, [0.12], rtol=1e-6)


def test_focal_loss_hand_computed():
    # softmax(log [1, 2, 1]) = [0.25, 0.5, 0.25].
    scores = jnp.log(jnp.array([[1.0, 2.0, 1.0], [1.0, 2.0, 1.0]]))
    loss = losses.focal_loss(scores, jnp.array([1, 0]))
    # -0.25 * 0.5^2 * ln 0.5 and -0.25 * 0.75^2 * ln 0.25.
    np.testing.assert_allclose(loss, [0.04332169878, 0.19494764453], rtol=1e-6)


def test_focal_loss_on_capsule_lengths():
    # p = 1 / (1 + e^-0.8) = 0.68997448; -0.25 (1 - p)^2 ln p = 0.00891716.
    loss = losses.focal_loss(jnp.array([[0.9, 0.1]]), jnp.array([0]))
    np.testing.assert_allclose(loss, [0.00891716142], rtol=1e-5)


def test_focal_loss_is_stable_for_extreme_scores():
    scores = jnp.array([[0.0, 1000.0], [0.0, 1000.0]])
    labels = jnp.array([0, 1])
    loss, grad = jax.jit(jax.vmap(jax.value_and_grad(losses.focal_loss)))(scores, labels)
    # log p = -1000 and (1 - p)^2 = 1 for the wrong class; p = 1 exactly for the right one.
    np.testing.assert_allclose(loss, [250.0, 0.0], rtol=1e-6)
    assert np.all(np.isfinite(grad))


def test_focal_loss_with_gamma_0_alpha_1_is_cross_entropy():
    scores = jnp.asarray(np.random.default_rng(0).normal(size=(5, 4)), jnp.float32)
    labels = jnp.array([0, 3, 1, 2, 3])
    np.testing.assert_allclose(
        losses.focal_loss(scores, labels, alpha=1.0, gamma=0.0),
        losses.cross_entropy(scores, labels),
        rtol=1e-6,
    )


def test_cross_entropy_hand_computed():
    logits = jnp.array(
        [[0.0, 0.0, 0.0, 0.0], [1000.0, 0.0, 0.0, 0.0], [0.0, math.log(3.0), 0.0, -1e30]]
    )
    loss = losses.cross_entropy(logits, jnp.array([2, 1, 1]))
    # ln 4; -log_softmax = 1000 without overflow; p = 3 / 5.
    np.testing.assert_allclose(loss, [math.log(4.0), 1000.0, -math.log(0.6)], rtol=1e-6)


@pytest.mark.parametrize("loss_fn", [losses.margin_loss, losses.focal_loss, losses.cross_entropy])
def test_int_labels_equal_one_hot_targets_with_leading_axes(loss_fn):
    rng = np.random.default_rng(1)
    scores = jnp.asarray(rng.uniform(size=(2, 3, 5)), jnp.float32)
    labels = jnp.asarray(rng.integers(0, 5, size=(2, 3)))
    from_ints = loss_fn(scores, labels)
    chex.assert_shape(from_ints, (2, 3))
    np.testing.assert_allclose(from_ints, loss_fn(scores, jax.nn.one_hot(labels, 5)), rtol=1e-6)


def test_sigmoid_binary_cross_entropy_hand_computed():
    logits = jnp.array([[0.0, 2.0, -3.0], [100.0, -100.0, -100.0]])
    multi_hot = jnp.array([[1, 0, 1], [1, 0, 1]])
    loss = losses.sigmoid_binary_cross_entropy(logits, multi_hot)
    # Row 0: ln 2 + ln(1 + e^2) + ln(1 + e^3). Row 1: ~0 + ~0 + 100 (no overflow).
    expected = [math.log(2.0) + math.log1p(math.exp(2.0)) + math.log1p(math.exp(3.0)), 100.0]
    np.testing.assert_allclose(loss, expected, rtol=1e-6)


def test_sigmoid_binary_cross_entropy_matches_numpy_formula():
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(4, 6)).astype(np.float32)
    targets = (rng.uniform(size=(4, 6)) < 0.3).astype(np.float32)
    prob = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
    expected = -np.sum(targets * np.log(prob) + (1 - targets) * np.log(1 - prob), axis=-1)
    np.testing.assert_allclose(
        losses.sigmoid_binary_cross_entropy(logits, targets), expected, rtol=1e-5
    )
