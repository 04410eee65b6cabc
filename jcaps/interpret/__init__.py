"""Explanations of classifiers' predictions: `jcaps.interpret.methods` explains any JAX model
(`from jcaps import interpret; interpret.integrated_gradients(f, x, target, ...)`) and
`interpret.faithfulness` measures an explanation of it the same way, `interpret.checks.sanity_checks`
checks it and `interpret.report.write_html` renders it; the modules beside them explain a trained
jcaps workdir (`python -m jcaps.interpret`)."""

import importlib

from jcaps.interpret.erasure import faithfulness
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
    "faithfulness",
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

# Loaded on first use: they reach the workdir machinery (checkpoints, datasets), which explaining
# a model of one's own does not need.
_SUBMODULES_ON_DEMAND = ("checks", "report")


def __getattr__(name: str):
    if name in _SUBMODULES_ON_DEMAND:
        return importlib.import_module(f"jcaps.interpret.{name}")
    raise AttributeError(f"module 'jcaps.interpret' has no attribute {name!r}")
