"""The checks every function of `jcaps.interpret` applies to its arguments before any work: one
line naming the argument and the shape expected. They run at trace time, on shapes and dtypes."""

from __future__ import annotations

import numbers

import jax
import jax.numpy as jnp
import numpy as np


def checked_target(target, batch: int, *, several: bool = True) -> jax.Array:
    """`target` as an int array: one int, [B] ints, or (when `several`) [B, K] ints."""
    target = jnp.asarray(target)
    most = 2 if several else 1
    if (
        not jnp.issubdtype(target.dtype, jnp.integer)
        or target.ndim > most
        or (target.ndim and target.shape[0] != batch)
    ):
        expected = "int [B] or [B, K]" if several else "int [B]"
        raise ValueError(
            f"target: expected an int, or {expected} with B = {batch} (x's batch), got {target.dtype} of shape "
            f"{target.shape}"
        )
    return target


def checked_classes(f, x: jax.Array, args: tuple, batch: int) -> int:
    """C, the outputs f(x, *args) -> [B, C] scores, read from their shape (nothing is computed)."""
    try:
        out = jax.eval_shape(f, x, *args)
    except (TypeError, ValueError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(
            f"f: f(x, *args) fails on x of shape {tuple(x.shape)} ({first_line[:200]}); f takes a batch: wrap a "
            "model of one example (an Equinox module) in jax.vmap"
        ) from error
    shape = getattr(out, "shape", None)
    if shape is None or len(shape) != 2 or shape[0] != batch:
        got = f"shape {tuple(shape)}" if shape is not None else type(out).__name__
        raise ValueError(f"f: expected f(x, *args) to return scores [B, C] with B = {batch} (x's batch), got {got}")
    return int(shape[1])


def checked_target_range(target: jax.Array | np.ndarray, classes: int) -> None:
    """Every target a class of f's output, 0 <= target < C. A traced target (under jax.jit) cannot
    be read here and is not checked."""
    if isinstance(target, jax.core.Tracer):
        return
    values = np.asarray(target)
    outside = values[(values < 0) | (values >= classes)]
    if outside.size:
        raise ValueError(
            f"target: expected class indices in [0, {classes}) ({classes} = the outputs of f), got {int(outside[0])}"
        )


def checked_mask(mask, batch: int, length: int) -> jax.Array:
    """`mask` as bool [B, T] (None: every position real)."""
    if mask is None:
        return jnp.ones((batch, length), bool)
    mask = jnp.asarray(mask)
    if mask.shape != (batch, length) or mask.dtype != jnp.bool_:
        raise ValueError(
            f"mask: expected bool [B, T] = [{batch}, {length}] (x's first two axes), got {mask.dtype} of shape "
            f"{mask.shape}"
        )
    return mask


def checked_args(args, batch: int) -> tuple[jax.Array, ...]:
    """f's per-example side inputs, each with the leading axis B."""
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"args: expected a tuple of f's per-example inputs, got {type(args).__name__}")
    args = tuple(jnp.asarray(a) for a in args)
    for i, a in enumerate(args):
        if a.ndim == 0 or a.shape[0] != batch:
            raise ValueError(f"args[{i}]: expected a leading axis of B = {batch} (x's batch), got shape {a.shape}")
    return args


def checked_model(f) -> None:
    """f must be the model, a function f(x, *args) -> [B, C]."""
    if not callable(f):
        raise TypeError(
            f"f: expected the model, a function f(x, *args) -> [B, C], got {type(f).__name__} "
            "(the arguments are f, x, target)"
        )


def checked_baseline(baseline, x: jax.Array) -> jax.Array:
    """`baseline` broadcast to x's shape and dtype (None: zeros)."""
    if baseline is None:
        return jnp.zeros_like(x)
    baseline = jnp.asarray(baseline, x.dtype)
    try:
        return jnp.broadcast_to(baseline, x.shape)
    except ValueError:
        raise ValueError(f"baseline: expected a shape broadcastable to x's {x.shape}, got {baseline.shape}") from None


def checked_count(name: str, value, minimum: int = 1) -> int:
    """A positive (or >= minimum) Python int option; a traced or non-integer value is refused."""
    if isinstance(value, jax.core.Tracer):
        raise TypeError(
            f"{name}: a Python int fixed before tracing, not a traced value; under jax.jit bind it with "
            f"functools.partial"
        )
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name}: expected an int >= {minimum}, got {value!r}")
    return int(value)


def checked_groups(groups, batch: int, length: int) -> jax.Array | None:
    """`groups` as int [B, T]: each position's group id, 0 <= g < T, or -1 for a position of no
    group (None: every position its own player). Ids are read where they are concrete; under
    jax.jit an id outside [-1, T) is not checked, and its position is in no group."""
    if groups is None:
        return None
    groups = jnp.asarray(groups)
    if groups.shape != (batch, length) or not jnp.issubdtype(groups.dtype, jnp.integer):
        raise ValueError(
            f"groups: expected int [B, T] = [{batch}, {length}] (x's first two axes; each position's group id, -1 "
            f"for none), got {groups.dtype} of shape {groups.shape}"
        )
    if not isinstance(groups, jax.core.Tracer):
        values = np.asarray(groups)
        outside = values[(values < -1) | (values >= length)]
        if outside.size:
            raise ValueError(
                f"groups: expected group ids in [0, {length}) ({length} = x's positions) or -1 for none, got "
                f"{int(outside[0])}"
            )
    return groups.astype(jnp.int32)
