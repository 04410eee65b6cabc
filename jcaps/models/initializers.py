"""Parameter initialisers shared by the models: those of the reference implementations
(PyTorch's recurrent and linear layers, Keras' embeddings), so that training starts alike."""

import flax.linen as nn
import jax
import jax.numpy as jnp


def uniform(bound: float):
    """U(-bound, bound): PyTorch's initialisation of recurrent layers (bound = 1/sqrt(H)) and
    of linear biases (bound = 1/sqrt(fan_in)); Keras' of embeddings (0.05)."""

    def init(key, shape, dtype=jnp.float32):
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


# U(-1/sqrt(fan_in), 1/sqrt(fan_in)), PyTorch's nn.Linear weight initialisation.
torch_linear_kernel = nn.initializers.variance_scaling(1 / 3, "fan_in", "uniform")
