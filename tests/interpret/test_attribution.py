"""Per-token attributions against hand-computable models: linear, one-token and masked. The
gradient methods run through `jcaps.attribution.methods`; occlusion, completeness and random
scores through their kernels."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.attribution import _kernels as attribution
from jcaps.attribution import methods

B, T, D, C = 3, 6, 4, 2
RNG = np.random.default_rng(0)
EMBEDDINGS = jnp.asarray(RNG.normal(size=(B, T, D)), jnp.float32)
MASK = jnp.asarray([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0]], bool)
WEIGHTS = jnp.asarray(RNG.normal(size=(T, D, C)), jnp.float32)


def tiled_mask(e):
    """MASK for a stack of copies of the batch, as e's dtype (it multiplies e)."""
    return jnp.tile(MASK, (e.shape[0] // B, 1)).astype(e.dtype)


def linear(e):
    """f(e) = sum_t mask_t e_t W_t: each token's share is exactly e_t . W_t[:, c]."""
    return jnp.einsum("btd,tdc->bc", e * tiled_mask(e)[..., None], WEIGHTS)


def reads_token_two(e):
    """A nonlinear model that reads only position 2."""
    return jnp.stack([jnp.tanh(e[:, 2] @ WEIGHTS[2, :, 0]), jnp.sin(e[:, 2] @ WEIGHTS[2, :, 1])], axis=-1) + 0.5


ZEROS = jnp.zeros_like(EMBEDDINGS)


def occlusion(f, target, **options):
    """The occlusion kernel with a zero baseline, every occluded copy in one call."""
    return attribution.occlusion(f, EMBEDDINGS, target, MASK, baseline=ZEROS, max_rows=T * B, linear_map=None,
                                 prefix_radius=None, groups=None, **options)


def gradient_methods(f, target):
    return {
        "gradient": methods.gradient(f, EMBEDDINGS, target, mask=MASK),
        "gradient_x_input": methods.gradient_x_input(f, EMBEDDINGS, target, mask=MASK),
        "integrated_gradients": methods.integrated_gradients(f, EMBEDDINGS, target, mask=MASK, n_steps=16,
                                                             max_rows=5 * B),
        "smoothgrad": methods.smoothgrad(f, EMBEDDINGS, target, mask=MASK, key=jax.random.key(0), n_samples=8,
                                         stddev=0.15),
        "occlusion": occlusion(f, target),
    }


def test_integrated_gradients_of_a_linear_model_is_gradient_times_input():
    target = jnp.asarray([0, 1, 1])
    ig = methods.integrated_gradients(linear, EMBEDDINGS, target, mask=MASK, n_steps=7, max_rows=3 * B)
    gxi = methods.gradient_x_input(linear, EMBEDDINGS, target, mask=MASK)
    expected = np.einsum("btd,btd->bt", np.asarray(EMBEDDINGS), np.asarray(WEIGHTS)[None, :, :, 0].repeat(B, 0))
    expected[1:] = np.einsum("btd,td->bt", np.asarray(EMBEDDINGS[1:]), np.asarray(WEIGHTS[:, :, 1]))
    expected = np.where(np.asarray(MASK), expected, 0)
    np.testing.assert_allclose(ig, gxi, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gxi, expected, rtol=1e-5, atol=1e-6)
    # Occlusion of a linear model with a zero baseline removes exactly the token's share.
    np.testing.assert_allclose(occlusion(linear, target), expected, rtol=1e-5, atol=1e-6)
    error = attribution.completeness_error(linear, EMBEDDINGS, target, ig, baseline=ZEROS)
    assert error.shape == (B,) and float(jnp.max(error)) < 1e-5


def test_completeness_error_of_a_nonlinear_model_shrinks_with_more_steps():
    def cubic(e):
        return jnp.sum(jnp.tanh(linear(e)) ** 3, axis=-1, keepdims=True) * jnp.ones((1, C))

    errors = [
        float(jnp.max(attribution.completeness_error(
            cubic, EMBEDDINGS, 0, methods.integrated_gradients(cubic, EMBEDDINGS, 0, mask=MASK, n_steps=n),
            baseline=ZEROS,
        )))
        for n in (2, 64)
    ]
    assert errors[1] < 0.01 and errors[1] < errors[0]


def test_occlusion_equals_an_explicit_loop_over_positions():
    def nonlinear(e):
        return jnp.tanh(linear(e)) * jnp.sum(e * tiled_mask(e)[..., None], axis=(1, 2))[:, None]

    target = jnp.asarray([1, 0, 1])
    scores = occlusion(nonlinear, target)
    full = np.asarray(nonlinear(EMBEDDINGS))[np.arange(B), target]
    for t in range(T):
        occluded = EMBEDDINGS.at[:, t].set(0.0)
        expected = full - np.asarray(nonlinear(occluded))[np.arange(B), target]
        np.testing.assert_allclose(scores[:, t], np.where(MASK[:, t], expected, 0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", [0, 1])
def test_a_model_that_reads_one_token_puts_it_first_under_every_method(target):
    for name, scores in gradient_methods(reads_token_two, target).items():
        magnitude = np.abs(np.asarray(scores))
        assert np.all(np.argmax(magnitude, axis=1) == 2), name
        others = np.delete(magnitude, 2, axis=1)
        assert np.all(others == 0), name


def test_padding_never_receives_attribution():
    def leaky(e):  # a model that (wrongly) reads the padding too
        return jnp.einsum("btd,tdc->bc", e, WEIGHTS)

    for name, scores in {**gradient_methods(leaky, 1),
                         "random": attribution.random_scores(jax.random.key(1), MASK)}.items():
        assert np.all(np.asarray(scores)[~np.asarray(MASK)] == 0), name
        assert np.all(np.asarray(scores)[np.asarray(MASK)] != 0), name


def test_attributions_work_under_jit():
    jitted = jax.jit(lambda e: methods.integrated_gradients(linear, e, 0, mask=MASK, n_steps=4))
    np.testing.assert_allclose(jitted(EMBEDDINGS), methods.gradient_x_input(linear, EMBEDDINGS, 0, mask=MASK),
                               rtol=1e-5, atol=1e-6)


def test_integrating_through_an_affine_first_layer_gives_the_same_attributions():
    kernel = jnp.asarray(RNG.normal(size=(D, 5)), jnp.float32)
    head = jnp.asarray(RNG.normal(size=(5, C)), jnp.float32)

    def affine(e):
        return e @ kernel + 0.3

    def after(z):
        return jnp.sum(jnp.tanh(z) ** 2 * tiled_mask(z)[..., None], axis=1) @ head

    target = jnp.asarray([0, 1, 0])
    def f(e):
        return after(affine(e))

    direct = methods.integrated_gradients(f, EMBEDDINGS, target, mask=MASK, n_steps=8)
    through = methods.integrated_gradients(f, EMBEDDINGS, target, mask=MASK, n_steps=8, affine_prefix=(affine, after))
    np.testing.assert_allclose(through, direct, rtol=1e-4, atol=1e-5)
    assert float(jnp.max(jnp.abs(direct))) > 0.1
