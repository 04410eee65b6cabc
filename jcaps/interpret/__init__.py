"""Explanations of classifiers' predictions: `jcaps.interpret.methods` explains any JAX model
(`from jcaps import interpret; interpret.integrated_gradients(f, x, target, ...)`) and
`interpret.faithfulness` measures an explanation of it the same way, `interpret.checks.sanity_checks`
checks it and `interpret.report.write_html` renders it; the modules beside them explain a trained
jcaps workdir (`python -m jcaps.interpret`).

The names below are imported with the first one used: importing the package (as
`python -m jcaps.interpret --help` does) does not load JAX, and explaining a model of one's own
does not load the workdir machinery (checkpoints, datasets) that `checks` and `report` reach."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jcaps.interpret import checks, report
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
    "checks",
    "faithfulness",
    "gradient",
    "gradient_x_input",
    "integrated_gradients",
    "kernel_shap",
    "lime",
    "occlusion",
    "random",
    "report",
    "shapley_sampling",
    "smoothgrad",
]
_SUBMODULES = ("checks", "report")
# Where a name is defined when it is not in jcaps.interpret.methods.
_DEFINED_IN = {"faithfulness": "jcaps.interpret.erasure"}


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"jcaps.interpret.{name}")
    if name in __all__:
        return getattr(importlib.import_module(_DEFINED_IN.get(name, "jcaps.interpret.methods")), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
