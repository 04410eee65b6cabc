"""The model table's losses and probabilities, hand-computed."""

import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from jcaps.models.outputs import ModelOutput
from jcaps.train.families import cccapsnet_probabilities, summed_loss


def test_summed_loss_hand_computed():
    config = ml_collections.ConfigDict({"loss": ""})
    outputs = ModelOutput(scores=jnp.array([[0.9, 0.1, 0.1], [0.5, 0.2, 0.8]]))
    batch = {"label": jnp.array([0, 2])}
    # Example 0: both margins met, margin loss 0; p = e^0.9 / (e^0.9 + 2 e^0.1) = 0.526688,
    #   focal = -0.25 (1 - p)^2 ln p = 0.035908.
    # Example 1: margin (0.9 - 0.8)^2 + 0.5 (0.4^2 + 0.1^2) = 0.095;
    #   p = e^0.8 / (e^0.5 + e^0.2 + e^0.8) = 0.436752, focal = 0.065701.
    config.loss = "margin"
    np.testing.assert_allclose(summed_loss(outputs, batch, config), [0.0, 0.095], rtol=1e-5)
    config.loss = "focal"
    np.testing.assert_allclose(summed_loss(outputs, batch, config), [0.0359082, 0.0657014], rtol=1e-4)
    config.loss = "margin+focal"
    np.testing.assert_allclose(summed_loss(outputs, batch, config), [0.0359082, 0.1607014], rtol=1e-4)
    config.loss = "ce+cross_entropy"
    ce = -np.log(np.array([0.526688, 0.436752]))
    np.testing.assert_allclose(summed_loss(outputs, batch, config), 2 * ce, rtol=1e-4)
    config.loss = "margin+hinge"
    with pytest.raises(ValueError, match="hinge"):
        summed_loss(outputs, batch, config)


def test_capsule_probabilities_normalise_lengths():
    outputs = ModelOutput(scores=jnp.array([[0.2, 0.6, 0.2]]), class_capsules=jnp.zeros((1, 3, 2)))
    np.testing.assert_allclose(cccapsnet_probabilities(outputs), [[0.2, 0.6, 0.2]], rtol=1e-6)


def test_linear_classifier_probabilities_are_a_softmax():
    outputs = ModelOutput(scores=jnp.array([[0.0, np.log(3.0)]]))
    np.testing.assert_allclose(cccapsnet_probabilities(outputs), [[0.25, 0.75]], rtol=1e-6)
