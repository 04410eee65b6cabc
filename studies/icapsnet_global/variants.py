"""The iCapsNets variants the routing study trains, composed from the library's model.

The library's `ICapsNetShort` carries the paper's routing and attention and the shipped
decisions; the study varies them by passing its own routing coupling (`ICapsNetShort.route`'s
`coupling`) and attention factor (`attention_logit_factor`). `StudyICapsNetShort` holds the
study's knobs as fields, so a run is still one config with `--config.model.KNOB=VALUE` flags, and
`register` adds it to the model table as `icapsnet_short_study`: `python -m
studies.icapsnet_global.train` trains it (with `config.py`), and the study's analysis loads its
workdirs.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from jcaps.interpret import hooks
from jcaps.models.icapsnet import ICapsNetShort
from jcaps.train import families

MODEL_NAME = "icapsnet_short_study"


def leaky_softmax(logits: jax.Array, axis: int = -1) -> jax.Array:
    """The leaky softmax of Zhao et al. (2018, Sec. 2.2): a softmax over the logits and an extra
    zero logit whose share is dropped, exp(b_j) / (1 + sum_j' exp(b_j')), so a capsule that agrees
    with no class routes less than 1 in all (stable form)."""
    top = jnp.maximum(jnp.max(logits, axis=axis, keepdims=True), 0.0)
    weights = jnp.exp(logits - top)
    return weights / (jnp.exp(-top) + jnp.sum(weights, axis=axis, keepdims=True))


def tempered(coupling, scale):
    """`coupling` of `scale` * logits: lambda, an inverse temperature on routing's agreement (the
    logits are sums of agreements from 0, so scaling them scales every agreement)."""

    def scaled(logits, axis=-1):
        return coupling(scale * logits, axis=axis)

    return scaled


class StudyICapsNetShort(ICapsNetShort):
    """iCapsNets Short with the routing study's knobs.

    Attributes (besides `ICapsNetShort`'s):
      routing_logit_scale: lambda, the inverse temperature on dynamic routing's agreement (1 in
        the paper).
      routing_logit_scale_learned: learn lambda (stored as its log, starting at
        `routing_logit_scale`).
      routing_orphan: dynamic routing through `leaky_softmax` (an orphan class).
      attention_logit_scale: tau, a further factor on the attention logits (1 in the paper). The
        logits start near 0, and with Adam a parameter moves about the same step whatever its
        scale, so tau > 1 lets the attention leave uniform sooner.
    """

    routing_logit_scale: float = 1.0
    routing_logit_scale_learned: bool = False
    routing_orphan: bool = False
    attention_logit_scale: float = 1.0

    def __post_init__(self):
        dynamic_only = {"routing_logit_scale": self.routing_logit_scale != 1.0,
                        "routing_logit_scale_learned": self.routing_logit_scale_learned,
                        "routing_orphan": self.routing_orphan}
        if self.routing != "dynamic" and any(dynamic_only.values()):
            knobs = ", ".join(name for name, set_ in dynamic_only.items() if set_)
            raise ValueError(f"{knobs}: dynamic routing only, but routing is {self.routing!r}")
        if self.routing_logit_scale <= 0:
            raise ValueError(f"routing_logit_scale must be positive, got {self.routing_logit_scale}")
        if self.attention_logit_scale <= 0:
            raise ValueError(f"attention_logit_scale must be positive, got {self.attention_logit_scale}")
        super().__post_init__()

    def setup(self):
        super().setup()
        if self.routing_logit_scale_learned:
            self.routing_log_scale = self.param(
                "routing_log_scale", nn.initializers.constant(math.log(self.routing_logit_scale)), ()
            )

    @property
    def attention_logit_factor(self) -> float:
        return self.attention_logit_scale * super().attention_logit_factor

    def route(self, u_hat, mask=None, iterations=None, *, coupling=jax.nn.softmax):
        if self.routing != "dynamic":
            return super().route(u_hat, mask, iterations)
        coupling = leaky_softmax if self.routing_orphan else jax.nn.softmax
        if self.routing_logit_scale_learned:
            coupling = tempered(coupling, jnp.exp(self.routing_log_scale))
        elif self.routing_logit_scale != 1.0:
            coupling = tempered(coupling, self.routing_logit_scale)
        return super().route(u_hat, mask, iterations, coupling=coupling)


@functools.cache
def register() -> None:
    """Adds `icapsnet_short_study` to the model table (once), with iCapsNets Short's loss and
    probabilities, and to the explained models with iCapsNets Short's explanation."""
    families.MODELS[MODEL_NAME] = dataclasses.replace(families.MODELS["icapsnet_short"], module=StudyICapsNetShort)
    hooks.MODEL_HOOKS[MODEL_NAME] = hooks.MODEL_HOOKS["icapsnet_short"]
