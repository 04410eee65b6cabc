"""Explanations of classifiers' predictions: `jcaps.interpret.methods` explains any JAX model
(`from jcaps import interpret; interpret.integrated_gradients(f, x, target, ...)`); the modules
beside it explain a trained jcaps workdir (`python -m jcaps.interpret`)."""

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
