"""Explanations of classifiers' predictions: `jcaps.interpret.methods` explains any JAX model
(`from jcaps import interpret; interpret.integrated_gradients(f, x, target, ...)`); the modules
beside it explain a trained jcaps workdir (`python -m jcaps.interpret`).

The names below are `jcaps.interpret.methods`' own, imported with the first one used: importing
the package (as `python -m jcaps.interpret --help` does) does not load JAX."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jcaps.interpret.methods import (
        DEFAULT_MAX_ROWS,
        METHODS,
        Method,
        aggregate,
        gradient,
        gradient_x_input,
        integrated_gradients,
        kernel_shap,
        lime,
        occlusion,
        random,
        shapley_sampling,
        smoothgrad,
    )

__all__ = [
    "DEFAULT_MAX_ROWS",
    "METHODS",
    "Method",
    "aggregate",
    "gradient",
    "gradient_x_input",
    "integrated_gradients",
    "kernel_shap",
    "lime",
    "occlusion",
    "random",
    "shapley_sampling",
    "smoothgrad",
]


def __getattr__(name: str):
    if name in __all__:
        from jcaps.interpret import methods

        return getattr(methods, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
