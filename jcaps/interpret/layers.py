"""A Flax module of token ids split at a named submodule, for the gradient methods: (embed, after)
with model(ids, *args) = after(embed(ids, *args), ids, *args), as `jcaps.attribution.at_layer`
takes them.

    embed, after = linen_split(model, {"params": params}, "embed")   # a linen module
    embed, after = nnx_split(model, "embed")                        # an NNX module
    explain = interpret.at_layer("integrated_gradients", embed, after)
    scores = explain(ids, target, mask=ids > 0)

`layer` names the submodule by its attribute names from the top, joined by "/" ("embed",
"encoder/embed"); embed gives what its `__call__` returns the first time the model calls it,
and after runs the model with that call returning h instead (linen: Flax's method interception;
NNX: a copy of the model with the submodule swapped). `outputs` picks the scores [B, C] from
the model's output where it returns more (a jcaps model's `ModelOutput`: `lambda out:
out.scores`). These need Flax, so they live here, not in the explanation layer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flax.linen as nn
from flax import nnx


def _identity(output: Any) -> Any:
    return output


def linen_split(
    module: nn.Module, variables: Any, layer: str, *, outputs: Callable[[Any], Any] = _identity
) -> tuple[Callable, Callable]:
    """(embed, after) of `module.apply(variables, ids, *args)` at the submodule `layer`."""
    path = tuple(layer.split("/"))

    def is_layer(context) -> bool:
        return context.module.path == path and context.method_name == "__call__"

    def embed(ids, *args):
        captured: list = []

        def capture(next_fun, call_args, call_kwargs, context):
            out = next_fun(*call_args, **call_kwargs)
            if is_layer(context) and not captured:
                captured.append(out)
            return out

        with nn.intercept_methods(capture):
            module.apply(variables, ids, *args)
        if not captured:
            raise ValueError(f"layer: {type(module).__name__} called no submodule at {layer!r} (names from the top)")
        return captured[0]

    def after(h, ids, *args):
        replaced: list = []

        def replace(next_fun, call_args, call_kwargs, context):
            if is_layer(context) and not replaced:
                replaced.append(True)
                return h
            return next_fun(*call_args, **call_kwargs)

        with nn.intercept_methods(replace):
            return outputs(module.apply(variables, ids, *args))

    return embed, after


def nnx_split(model: Any, layer: str, *, outputs: Callable[[Any], Any] = _identity) -> tuple[Callable, Callable]:
    """(embed, after) of the NNX module `model(ids, *args)` at its submodule `layer`. Each call
    works on a copy of the model made there (`nnx.split` then `nnx.merge`: NNX forbids changing a
    module from inside a trace it was not made in), so the model's current parameters are used
    and the model itself is never changed."""
    *parents, name = layer.split("/")

    def located(root: Any) -> tuple[Any, Callable]:
        parent = root
        for step in parents:
            parent = getattr(parent, step, None)
        original = getattr(parent, name, None)
        if original is None or not callable(original):
            raise ValueError(
                f"layer: {type(model).__name__} has no submodule at {layer!r} (attribute names from the top)"
            )
        return parent, original

    located(model)  # a missing layer is named before any work

    def copy_with(stand_in: Callable[[Callable], Callable]) -> Any:
        copy = nnx.merge(*nnx.split(model))
        parent, original = located(copy)
        setattr(parent, name, stand_in(original))
        return copy

    def embed(ids, *args):
        captured: list = []

        def capturing(original: Callable) -> Callable:
            def capture(*call_args, **call_kwargs):
                out = original(*call_args, **call_kwargs)
                if not captured:
                    captured.append(out)
                return out

            return capture

        copy_with(capturing)(ids, *args)
        return captured[0]

    def after(h, ids, *args):
        calls: list = []

        def replacing(original: Callable) -> Callable:
            def stand_in(*call_args, **call_kwargs):
                calls.append(True)
                return h if len(calls) == 1 else original(*call_args, **call_kwargs)

            return stand_in

        return outputs(copy_with(replacing)(ids, *args))

    return embed, after
