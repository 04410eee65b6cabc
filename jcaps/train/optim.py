"""Optimisers and learning-rate schedules from `config.train`.

Parameter groups (`train.param_groups`) train the top-level subtrees of the parameter tree
at their own settings: `{"embedding": {"learning_rate": 1e-2}, "encoder": {},
"classifier": {"learning_rate": 2e-3}}` gives each of CCCapsNet's three modules its own
optimiser (`{}`: the `train.*` settings), all on the same `train.schedule`, clipped once by
the norm of all gradients together.
"""

from __future__ import annotations

import jax
import optax

from jcaps.choices import check_choice
from jcaps.errors import ConfigError
from jcaps.train.config import Optimizer, Schedule


def learning_rate_schedule(train_config, num_steps: int, peak: float | None = None) -> optax.Schedule:
    """`constant | cosine | linear | warmup_cosine | steps` over `num_steps` updates, from
    `peak` (default `train.learning_rate`)."""
    lr, kind = train_config.learning_rate if peak is None else peak, train_config.schedule
    check_choice("train.schedule", kind, Schedule, ConfigError)
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
    else:  # steps
        boundaries = {int(f * num_steps): train_config.decay_factor for f in train_config.decay_boundaries}
        schedule = optax.piecewise_constant_schedule(lr, boundaries)
    if warmup:
        return optax.join_schedules([optax.linear_schedule(0.0, lr, warmup), schedule], [warmup])
    return schedule


def make_optimizer(train_config, num_steps: int) -> optax.GradientTransformation:
    """Gradient clipping by the norm of all gradients together (`train.grad_clip_norm`, 0: none)
    followed by the configured optimiser, or by one per parameter group (`train.param_groups`)."""
    groups = train_config.param_groups
    if groups:
        optimizer = optax.multi_transform(
            {
                name: _optimizer(
                    train_config,
                    num_steps,
                    settings.get("learning_rate", train_config.learning_rate),
                    settings.get("weight_decay", train_config.weight_decay),
                )
                for name, settings in groups.items()
            },
            lambda params: parameter_groups(params, tuple(groups)),
        )
    else:
        optimizer = _optimizer(train_config, num_steps, train_config.learning_rate, train_config.weight_decay)
    if train_config.grad_clip_norm:
        optimizer = optax.chain(optax.clip_by_global_norm(train_config.grad_clip_norm), optimizer)
    return _with_standard_promotion(optimizer)


def _with_standard_promotion(optimizer: optax.GradientTransformation) -> optax.GradientTransformation:
    """`optimizer` whose updates follow JAX's standard dtype promotion whatever the global setting:
    optax mixes Python floats with the int32 step count (Adam's bias correction 1 - b1 ** count,
    the schedules), which `jax_numpy_dtype_promotion='strict'` refuses. Same state, same numbers."""

    def update(updates, state, params=None):
        with jax.numpy_dtype_promotion("standard"):
            return optimizer.update(updates, state, params)

    return optax.GradientTransformation(optimizer.init, update)


def parameter_groups(params, names: tuple[str, ...]):
    """`params` with each leaf replaced by the name of its group: its top-level subtree's name,
    which must be one of `names`."""
    ungrouped = sorted(set(params) - set(names))
    if ungrouped:
        raise ConfigError(
            f"train.param_groups has no group for the parameters {', '.join(ungrouped)}; with groups, "
            f"every top-level parameter subtree ({', '.join(params)}) needs one ({{}}: the train.* settings)"
        )
    return jax.tree_util.tree_map_with_path(lambda path, _: path[0].key, params)


def _optimizer(train_config, num_steps: int, learning_rate: float, weight_decay: float):
    schedule = learning_rate_schedule(train_config, num_steps, learning_rate)
    kind = train_config.optimizer
    check_choice("train.optimizer", kind, Optimizer, ConfigError)
    if kind == "adam":
        return optax.adam(schedule)
    if kind == "adamw":
        return optax.adamw(schedule, weight_decay=weight_decay)
    return optax.sgd(schedule, momentum=0.9)
