"""Dropout from packed random bits: the rate drawn, the scale, the mask against NumPy's view of
the same 32-bit draws, independence of the packed elements, the gradient and the edge rates."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.ops.regularisation import drop_threshold, dropout, keep_mask


@pytest.mark.parametrize(("rate", "expected"), [(0.5, (8, 128)), (0.25, (8, 64)), (0.1, (16, 6554)), (0.3, (16, 19661))])
def test_drop_threshold_uses_8_bits_where_exact_and_16_otherwise(rate, expected):
    assert drop_threshold(rate) == expected


@pytest.mark.parametrize(("rate", "dtype"), [(0.5, np.uint8), (0.1, np.uint16)])
def test_mask_is_numpys_view_of_the_same_32_bit_draws(rate, dtype):
    key = jax.random.key(3)
    shape = (3, 5, 8)  # 120 elements: whole 32-bit draws for both widths
    per_draw = 4 if dtype is np.uint8 else 2
    draws = np.asarray(jax.random.bits(key, (120 // per_draw,), jnp.uint32))
    _, threshold = drop_threshold(rate)
    expected = (draws.view(dtype) >= threshold).reshape(shape)  # little-endian, as XLA's bitcast
    np.testing.assert_array_equal(keep_mask(key, rate, shape), expected)


@pytest.mark.parametrize("rate", [0.5, 0.1, 0.3, 0.875])
def test_keep_fraction_and_scale(rate):
    x = jnp.full((1000, 1000), 3.0)
    y = np.asarray(jax.jit(dropout, static_argnames="rate")(x, rate=rate, key=jax.random.key(0)))
    bits, threshold = drop_threshold(rate)
    keep = 1 - threshold / 2**bits
    kept = y != 0
    # Binomial standard deviation of the kept fraction over 1e6 elements.
    assert abs(kept.mean() - keep) < 5 * np.sqrt(keep * (1 - keep) / kept.size)
    np.testing.assert_allclose(y[kept], 3.0 / keep, rtol=1e-6)
    # Each of the four bytes of a 32-bit draw keeps its own share (a packing bug that reused a
    # byte would show as equal or correlated neighbours).
    by_position = kept.reshape(-1, 4).mean(axis=0)
    assert np.all(np.abs(by_position - keep) < 5 * np.sqrt(keep * (1 - keep) / (kept.size / 4)))
    neighbours = np.corrcoef(kept.reshape(-1)[:-1], kept.reshape(-1)[1:])[0, 1]
    assert abs(neighbours) < 0.01


def test_expectation_over_keys_is_the_input():
    x = jnp.linspace(-2.0, 2.0, 12)
    keys = jax.random.split(jax.random.key(1), 20000)
    mean = jax.jit(jax.vmap(lambda key: dropout(x, rate=0.1, key=key)))(keys).mean(axis=0)
    np.testing.assert_allclose(mean, x, atol=0.05)


def test_same_key_same_mask_other_key_other_mask():
    x = jnp.ones((7, 9))  # 63 elements: not a whole number of draws
    first, again = dropout(x, rate=0.5, key=jax.random.key(5)), dropout(x, rate=0.5, key=jax.random.key(5))
    np.testing.assert_array_equal(first, again)
    assert np.any(np.asarray(first) != np.asarray(dropout(x, rate=0.5, key=jax.random.key(6))))


def test_gradient_is_the_scaled_mask():
    rng = np.random.default_rng(0)
    x, weights = rng.normal(size=(4, 6)).astype(np.float32), rng.normal(size=(4, 6)).astype(np.float32)
    key = jax.random.key(2)
    grad = jax.grad(lambda x: jnp.sum(weights * dropout(x, rate=0.25, key=key)))(x)
    expected = weights * np.asarray(keep_mask(key, 0.25, x.shape)) / 0.75
    np.testing.assert_allclose(grad, expected, rtol=1e-6)


def test_edge_rates():
    x = jnp.arange(1.0, 7.0)
    key = jax.random.key(0)
    np.testing.assert_array_equal(dropout(x, rate=0.0, key=key), x)
    np.testing.assert_array_equal(dropout(x, rate=0.5, key=None), x)  # evaluation
    np.testing.assert_array_equal(dropout(x, rate=1e-7, key=key), x)  # rounds to no drop
    np.testing.assert_array_equal(dropout(x, rate=1.0, key=key), np.zeros(6))
    np.testing.assert_array_equal(dropout(x, rate=1 - 1e-7, key=key), np.zeros(6))  # rounds to all
    grad = jax.grad(lambda x: jnp.sum(dropout(x, rate=1 - 1e-7, key=key)))(x)
    np.testing.assert_array_equal(grad, np.zeros(6))
    with pytest.raises(ValueError, match="outside"):
        dropout(x, rate=1.5, key=key)
