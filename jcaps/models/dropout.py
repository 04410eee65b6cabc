"""Dropout as a Flax module: `flax.linen.Dropout`'s interface over `jcaps.ops.dropout`, whose
mask costs a quarter (or half) of `jax.random.bernoulli`'s random bits
(`jcaps/ops/regularisation.py` says why and how)."""

import flax.linen as nn
import jax

from jcaps.ops.regularisation import dropout


class Dropout(nn.Module):
    """Inverted dropout drawing its mask from the 'dropout' RNG stream.

    Attributes:
        rate: the probability of dropping an element.
        deterministic: the identity when True (evaluation); may be given at the call instead.
    """

    rate: float
    deterministic: bool | None = None

    @nn.compact
    def __call__(self, x: jax.Array, *, deterministic: bool | None = None) -> jax.Array:
        if nn.merge_param("deterministic", self.deterministic, deterministic) or self.rate == 0:
            return x
        return dropout(x, rate=self.rate, key=self.make_rng("dropout"))
