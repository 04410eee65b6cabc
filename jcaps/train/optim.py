"""Optimisers and learning-rate schedules from `config.train`."""

from __future__ import annotations

import optax

from jcaps.errors import ConfigError
from jcaps.train.config import OPTIMIZERS, SCHEDULES


def learning_rate_schedule(train_config, num_steps: int) -> optax.Schedule:
    """`constant | cosine | linear | warmup_cosine | steps` over `num_steps` updates."""
    lr, kind = train_config.learning_rate, train_config.schedule
    warmup = int(train_config.warmup_fraction * num_steps)
    if kind == "constant":
        schedule = optax.constant_schedule(lr)
    elif kind == "cosine":
        schedule = optax.cosine_decay_schedule(lr, max(num_steps, 1))
    elif kind == "linear":
        schedule = optax.linear_schedule(lr, 0.0, max(num_steps, 1))
    elif kind == "warmup_cosine":
        # At least one warm-up and one decay step, so that a state built for loading (1 step)
        # has a valid schedule too.
        warmup = max(warmup, 1)
        return optax.warmup_cosine_decay_schedule(0.0, lr, warmup, max(num_steps, warmup + 1))
    elif kind == "steps":
        boundaries = {int(f * num_steps): train_config.decay_factor for f in train_config.decay_boundaries}
        schedule = optax.piecewise_constant_schedule(lr, boundaries)
    else:
        raise ConfigError(f"train.schedule must be one of {', '.join(SCHEDULES)}, not {kind!r}")
    if warmup:
        return optax.join_schedules([optax.linear_schedule(0.0, lr, warmup), schedule], [warmup])
    return schedule


def make_optimizer(train_config, num_steps: int, learning_rate=None) -> optax.GradientTransformation:
    """Gradient clipping (if set) followed by the configured optimiser."""
    learning_rate = learning_rate_schedule(train_config, num_steps) if learning_rate is None else learning_rate
    kind = train_config.optimizer
    if kind == "adam":
        optimizer = optax.adam(learning_rate)
    elif kind == "adamw":
        optimizer = optax.adamw(learning_rate, weight_decay=train_config.weight_decay)
    elif kind == "sgd":
        optimizer = optax.sgd(learning_rate, momentum=0.9)
    else:
        raise ConfigError(f"train.optimizer must be one of {', '.join(OPTIMIZERS)}, not {kind!r}")
    if train_config.grad_clip_norm:
        return optax.chain(optax.clip_by_global_norm(train_config.grad_clip_norm), optimizer)
    return optimizer
