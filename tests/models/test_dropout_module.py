"""The Dropout module: the identity when deterministic, otherwise `jcaps.ops.dropout` with a key
from the 'dropout' stream (other keys, other masks)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jcaps.models.dropout import Dropout


def test_deterministic_is_the_identity_at_construction_or_call():
    x = jnp.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(Dropout(0.5, deterministic=True).apply({}, x), x)
    np.testing.assert_array_equal(Dropout(0.5).apply({}, x, deterministic=True), x)
    with pytest.raises(ValueError):
        Dropout(0.5).apply({}, x)  # neither says: flax's rule


def test_training_draws_from_the_dropout_stream():
    x = jnp.ones((8, 16))
    module = Dropout(0.5, deterministic=False)
    first = module.apply({}, x, rngs={"dropout": jax.random.key(0)})
    again = module.apply({}, x, rngs={"dropout": jax.random.key(0)})
    other = module.apply({}, x, rngs={"dropout": jax.random.key(1)})
    assert set(np.unique(np.asarray(first))) == {0.0, 2.0}
    np.testing.assert_array_equal(first, again)
    assert np.any(np.asarray(first) != np.asarray(other))
